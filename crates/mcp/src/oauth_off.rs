//! Built without the `oauth` feature: no OAuth access tokens are
//! validated. A config with `auth.oauth` is refused before a validator
//! would be made ([`crate::Gateway::serve_http`]), so this type has no
//! values and its methods cannot be reached.

use serde_json::Value;

use crate::principal::Principal;

/// No values: see the module's doc.
pub(crate) enum TokenValidator {}

impl TokenValidator {
    pub(crate) fn metadata_url(&self) -> String {
        match *self {}
    }

    pub(crate) fn metadata(&self) -> Value {
        match *self {}
    }

    pub(crate) async fn validate(&self, _token: &str) -> Result<Principal, String> {
        match *self {}
    }
}
