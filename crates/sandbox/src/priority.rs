//! Short cells first: a guest call that has run for [`DEMOTE_AFTER`] of
//! CPU (a busy loop, a big computation) gives its thread a lower
//! scheduling priority until the call returns, so the short cells of other
//! sessions are not queued behind it on a machine with few cores. Its own
//! limits (`timeoutMs`) are unchanged; it only yields the CPU when others
//! want it.
//!
//! Linux only. Demotion is used only when the process may also restore the
//! priority afterwards (root, `CAP_SYS_NICE` or a raised `RLIMIT_NICE`):
//! a thread of the runtime's pool must never stay demoted for the next
//! cell. That is probed once, on a throwaway thread.

use std::sync::OnceLock;
use std::time::Duration;

/// Guest CPU time in one call before its thread is demoted (the epoch
/// ticks once a millisecond while guest code runs).
pub(crate) const DEMOTE_AFTER: Duration = Duration::from_millis(20);

/// How much lower a demoted thread runs (`nice` steps; CFS gives a thread
/// at +10 about a tenth of the share of one at 0).
const DEMOTED_BY: i32 = 10;

/// A demoted thread; dropping it restores the thread's priority.
#[derive(Debug)]
pub(crate) struct Demoted {
    #[cfg(target_os = "linux")]
    tid: libc::id_t,
    #[cfg(target_os = "linux")]
    original: i32,
}

/// Demotes the calling thread, when the process can undo it.
pub(crate) fn demote_current_thread() -> Option<Demoted> {
    if !available() {
        return None;
    }
    imp::demote()
}

fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let probe = std::thread::Builder::new()
            .name("codemode-priority-probe".into())
            .spawn(imp::probe)
            .ok()
            .and_then(|t| t.join().ok())
            .unwrap_or(false);
        if !probe {
            tracing::debug!(
                "long guest calls keep their thread's priority: this process may not restore a lowered priority"
            );
        }
        probe
    })
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{DEMOTED_BY, Demoted};

    fn tid() -> libc::id_t {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
    }

    /// The thread's nice value (getpriority returns -1 both as a value and
    /// as an error, so errno tells them apart).
    fn nice_of(tid: libc::id_t) -> Option<i32> {
        // SAFETY: errno is thread-local; getpriority only reads.
        unsafe {
            *libc::__errno_location() = 0;
            let value = libc::getpriority(libc::PRIO_PROCESS, tid);
            (value != -1 || *libc::__errno_location() == 0).then_some(value)
        }
    }

    fn set_nice(tid: libc::id_t, nice: i32) -> bool {
        // SAFETY: setpriority on our own thread id only changes its
        // scheduling weight.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) == 0 }
    }

    pub(super) fn probe() -> bool {
        let tid = tid();
        let Some(original) = nice_of(tid) else {
            return false;
        };
        set_nice(tid, (original + DEMOTED_BY).min(19)) && set_nice(tid, original)
    }

    pub(super) fn demote() -> Option<Demoted> {
        let tid = tid();
        let original = nice_of(tid)?;
        set_nice(tid, (original + DEMOTED_BY).min(19)).then_some(Demoted { tid, original })
    }

    impl Drop for Demoted {
        fn drop(&mut self) {
            if !set_nice(self.tid, self.original) {
                tracing::warn!(
                    tid = self.tid,
                    "could not restore a runtime thread's priority after a long guest call"
                );
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::Demoted;

    pub(super) fn probe() -> bool {
        false
    }

    pub(super) fn demote() -> Option<Demoted> {
        None
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_demoted_thread_gets_its_priority_back() {
        std::thread::spawn(|| {
            let tid = imp_tid();
            let before = imp_nice(tid);
            match demote_current_thread() {
                Some(guard) => {
                    assert_eq!(imp_nice(tid), (before + DEMOTED_BY).min(19));
                    drop(guard);
                    assert_eq!(imp_nice(tid), before);
                }
                // Unprivileged: nothing changes at all.
                None => assert_eq!(imp_nice(tid), before),
            }
        })
        .join()
        .unwrap();
    }

    fn imp_tid() -> libc::id_t {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
    }

    fn imp_nice(tid: libc::id_t) -> i32 {
        // SAFETY: getpriority only reads.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) }
    }
}
