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
use std::time::{Duration, Instant};

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

/// Runs one burst of a run (an `exec` or `wait` drive) on this thread:
/// [`burst_checkpoint`] inside it demotes the thread once the burst has
/// used [`DEMOTE_AFTER`] of CPU (guest code and the host work it asked
/// for, like a loop of `tools.describe`), and the thread's priority is
/// restored when `f` returns.
pub fn burst<R>(f: impl FnOnce() -> R) -> R {
    run_burst(None, f)
}

/// A burst run in an async task, on a thread that other tasks share (an
/// idle cell going on where its calls' results arrived): once it has run
/// for [`LEAVE_TASK_AFTER`] of wall time — guest code, or host work it
/// asked for — `leave` is called once, on this thread, to hand the
/// thread's other work elsewhere (the runtime's `block_in_place`). Short
/// bursts, the common case, never call it.
pub fn burst_in_task<R>(leave: fn(), f: impl FnOnce() -> R) -> R {
    run_burst(Some(leave), f)
}

/// How long a burst in a task runs before it leaves the task's thread.
pub const LEAVE_TASK_AFTER: Duration = Duration::from_millis(2);

/// Inside [`burst_in_task`], once the burst is [`LEAVE_TASK_AFTER`] old:
/// calls its `leave` (once). Called by the epoch tick of a running guest
/// and by [`burst_checkpoint`].
pub(crate) fn leave_task_if_long() {
    let leave = BURST.with(|b| {
        let mut burst = b.borrow_mut();
        let burst = burst.as_mut()?;
        if burst.leave.is_some() && burst.wall_at_start.elapsed() >= LEAVE_TASK_AFTER {
            burst.leave.take()
        } else {
            None
        }
    });
    // Called outside the borrow: `leave` may run other code on this thread.
    if let Some(leave) = leave {
        leave();
    }
}

fn run_burst<R>(leave: Option<fn()>, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Burst>);
    impl Drop for Reset {
        fn drop(&mut self) {
            // Restores the priority (dropping any `Demoted`) and brings
            // back an enclosing burst, if one was running.
            BURST.with(|b| *b.borrow_mut() = self.0.take());
        }
    }
    // Where demotion cannot be undone, a burst costs nothing at all.
    let cpu_at_start = if available() {
        imp::thread_cpu_time()
    } else {
        None
    };
    let outer = BURST.with(|b| {
        b.borrow_mut().replace(Burst {
            wall_at_start: Instant::now(),
            cpu_at_start,
            demoted: None,
            leave,
        })
    });
    let _reset = Reset(outer);
    f()
}

/// Inside [`burst`]: demotes the thread once the burst has used
/// [`DEMOTE_AFTER`] of CPU. A no-op outside a burst, after demotion, and
/// in a burst younger than [`DEMOTE_AFTER`] of wall time (it cannot have
/// used more CPU than that yet), so short cells never read the CPU clock
/// (a system call) here.
pub fn burst_checkpoint() {
    leave_task_if_long();
    BURST.with(|b| {
        let mut burst = b.borrow_mut();
        let Some(burst) = burst.as_mut() else {
            return;
        };
        let Some(start) = burst.cpu_at_start else {
            return;
        };
        if burst.demoted.is_some() || burst.wall_at_start.elapsed() < DEMOTE_AFTER {
            return;
        }
        let Some(now) = imp::thread_cpu_time() else {
            return;
        };
        if now.saturating_sub(start) >= DEMOTE_AFTER {
            burst.demoted = demote_current_thread();
            if burst.demoted.is_none() {
                // Failed once: do not retry on every checkpoint.
                burst.cpu_at_start = None;
            }
        }
    });
}

struct Burst {
    /// Called once when a burst in a task turns out long.
    leave: Option<fn()>,
    wall_at_start: Instant,
    /// `None`: this burst is never demoted.
    cpu_at_start: Option<Duration>,
    demoted: Option<Demoted>,
}

thread_local! {
    static BURST: std::cell::RefCell<Option<Burst>> = const { std::cell::RefCell::new(None) };
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

    /// CPU time this thread has used.
    pub(super) fn thread_cpu_time() -> Option<std::time::Duration> {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec we own.
        let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
        ok.then(|| {
            std::time::Duration::new(
                u64::try_from(ts.tv_sec).unwrap_or(0),
                u32::try_from(ts.tv_nsec).unwrap_or(0),
            )
        })
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

    pub(super) fn thread_cpu_time() -> Option<std::time::Duration> {
        None
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

    #[test]
    fn a_burst_that_burns_cpu_is_demoted_until_it_ends() {
        std::thread::spawn(|| {
            let tid = imp_tid();
            let before = imp_nice(tid);
            let during = burst(|| {
                burst_checkpoint();
                let early = imp_nice(tid);
                // Burn a little more than DEMOTE_AFTER of CPU.
                let start = imp::thread_cpu_time().unwrap();
                while imp::thread_cpu_time().unwrap() - start < DEMOTE_AFTER * 2 {
                    std::hint::black_box(0u64);
                }
                burst_checkpoint();
                (early, imp_nice(tid))
            });
            assert_eq!(during.0, before, "a fresh burst is not demoted");
            if available() {
                assert_eq!(during.1, (before + DEMOTED_BY).min(19));
            }
            assert_eq!(imp_nice(tid), before, "restored when the burst ends");
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
