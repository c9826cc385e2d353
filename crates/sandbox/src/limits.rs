//! The limits one VM runs under.

use std::time::{Duration, Instant};

/// Hard limits for one VM, enforced by the host. A hostile guest can reach
/// any of them but cannot raise or catch them.
///
/// ```
/// use codemode_sandbox::Limits;
/// let limits = Limits { memory_limit_bytes: 8 << 20, ..Limits::default() };
/// assert_eq!(limits.max_output_bytes, 65_536);
/// ```
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall-clock budget of one `start`/`settle` burst. The host interrupts
    /// the guest through wasmtime epochs; a `while(true){}` stops within a
    /// few milliseconds of the deadline.
    pub timeout: Duration,
    /// Guest heap limit. QuickJS's allocator is held to it, and the linear
    /// memory may grow only a little past it (allocator slack), so host
    /// memory stays bounded whatever the guest does.
    pub memory_limit_bytes: usize,
    /// Bytes of output (`text`, `json`) one VM may produce over its life.
    pub max_output_bytes: usize,
    /// Largest in-memory snapshot a suspend may produce.
    pub max_snapshot_bytes: usize,
    /// Requests the guest may have outstanding at once. The host refuses the
    /// VM (a trap) beyond a hard bound; the runtime applies the friendlier
    /// `maxPendingToolCalls` policy itself.
    pub max_outstanding_requests: usize,
    /// Largest single request payload the guest may send.
    pub max_request_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(10),
            memory_limit_bytes: 64 << 20,
            max_output_bytes: 65_536,
            max_snapshot_bytes: 10 << 20,
            max_outstanding_requests: 1024,
            max_request_bytes: 1 << 20,
        }
    }
}

impl Limits {
    /// The deadline of a burst that starts now.
    pub fn deadline_from_now(&self) -> Instant {
        Instant::now() + self.timeout
    }
}
