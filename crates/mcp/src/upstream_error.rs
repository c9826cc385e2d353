//! The error of one upstream request: below the upstream connection and
//! its OAuth client, which both return it.

/// A failed upstream request, fit for the model (server name and cause,
/// never a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UpstreamError(pub String);
