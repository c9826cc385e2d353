//! The limits one VM runs under.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Stops a running VM from another thread within about a millisecond (the
/// epoch tick): the guest traps and the VM fails with
/// [`crate::FailureKind::Aborted`]. Cheap to clone; all clones share one flag.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// A flag that is not set.
    pub fn new() -> CancelFlag {
        CancelFlag::default()
    }

    /// Sets the flag: every VM running under it stops at its next epoch
    /// check, and VMs entered later fail at once.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancelFlag::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

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
    /// Set from outside to stop the VM (abort, a client's cancellation).
    pub cancel: CancelFlag,
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
            cancel: CancelFlag::new(),
        }
    }
}

impl Limits {
    /// The deadline of a burst that starts now.
    pub fn deadline_from_now(&self) -> Instant {
        Instant::now() + self.timeout
    }
}
