//! Live-VM slots: how many cells may run at once in the process and in one
//! scope (one MCP client session, one agent run).
//!
//! The sandbox's pool holds a fixed number of live VMs. Without shares, one
//! session with many execs awaiting a slow tool holds every VM and another
//! session's `return 1` fails. So each scope may hold at most its share,
//! and beyond it (or when the process is full) an exec or wait queues
//! briefly — a short, bounded queue — and then fails with
//! `runtime_busy` and a message that names the limit.
//!
//! A cell that only awaits nested calls does not keep its VM: after a short
//! idle spell it is parked ([`ProcessSlots::try_park`]): its VM becomes a
//! snapshot, its slot is freed, and the exec or wait driving it awaits the
//! next result without a thread, then takes a slot again and resumes it.
//! So a few live VMs serve thousands of cells awaiting slow tools. Parked
//! cells are bounded too (per process and per scope); a cell that cannot
//! park keeps its VM, and when an exec or wait queues for a process slot
//! one such idle cell gives its VM up by suspending (`waiting`, its calls
//! keep running) as it would at its deadline
//! ([`ProcessSlots::take_yield_request`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The process's live-VM slots.
pub(crate) struct ProcessSlots {
    slots: Arc<Semaphore>,
    total: usize,
    per_scope: usize,
    queue_timeout: Duration,
    queued: AtomicUsize,
    /// Waiters for a process slot that no idle cell has yielded to yet.
    yield_requests: AtomicUsize,
    /// Cells parked now, and how many may be.
    parked: Arc<AtomicUsize>,
    max_parked: usize,
    max_parked_per_scope: usize,
}

/// One scope's share of the process's slots.
pub(crate) struct ScopeSlots {
    slots: Arc<Semaphore>,
    queued: AtomicUsize,
    parked: Arc<AtomicUsize>,
}

/// Held while a cell is parked (counted against the process's and its
/// scope's bounds); dropping it ends the count.
pub(crate) struct ParkTicket {
    process: Arc<AtomicUsize>,
    scope: Arc<AtomicUsize>,
}

impl Drop for ParkTicket {
    fn drop(&mut self) {
        self.process.fetch_sub(1, Ordering::SeqCst);
        self.scope.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Held while a VM of the scope is live (an exec or a wait).
pub(crate) struct VmPermit {
    _scope: OwnedSemaphorePermit,
    _process: OwnedSemaphorePermit,
}

/// Why no VM slot could be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SlotError {
    #[error(
        "this session already runs {limit} cells at once (its share of live VMs, maxLiveVmsPerSession) and {queued} more are queued; await or wait for running cells before starting more"
    )]
    ScopeBusy { limit: usize, queued: usize },
    #[error(
        "all {limit} live VMs of this process are busy (maxLiveVms) and none freed within {waited_ms} ms; try again shortly"
    )]
    ProcessBusy { limit: usize, waited_ms: u128 },
}

/// Decrements a queue counter when the waiter leaves (by any path).
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ProcessSlots {
    /// `total` live VMs, `per_scope` of them for one scope; at most
    /// `max_parked` cells parked at once, `max_parked_per_scope` of one
    /// scope.
    pub(crate) fn new(
        total: usize,
        per_scope: usize,
        queue_timeout: Duration,
        (max_parked, max_parked_per_scope): (usize, usize),
    ) -> ProcessSlots {
        let total = total.max(1);
        ProcessSlots {
            slots: Arc::new(Semaphore::new(total)),
            total,
            per_scope: per_scope.clamp(1, total),
            queue_timeout,
            queued: AtomicUsize::new(0),
            yield_requests: AtomicUsize::new(0),
            parked: Arc::default(),
            max_parked,
            max_parked_per_scope: max_parked_per_scope.min(max_parked),
        }
    }

    /// Counts one more parked cell of `scope`, or `None` when the process
    /// or the scope holds as many as it may (the cell keeps its VM).
    pub(crate) fn try_park(&self, scope: &ScopeSlots) -> Option<ParkTicket> {
        let take = |count: &AtomicUsize, max: usize| {
            count
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok()
        };
        if !take(&scope.parked, self.max_parked_per_scope) {
            return None;
        }
        if !take(&self.parked, self.max_parked) {
            scope.parked.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(ParkTicket {
            process: Arc::clone(&self.parked),
            scope: Arc::clone(&scope.parked),
        })
    }

    /// Cells parked now (for tests and metrics).
    pub(crate) fn parked(&self) -> usize {
        self.parked.load(Ordering::SeqCst)
    }

    /// Takes one waiter's request that an idle cell give up its VM:
    /// `true` means this caller should suspend now.
    pub(crate) fn take_yield_request(&self) -> bool {
        self.yield_requests
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    /// After a waiter left the queue (with a slot, or giving up): no more
    /// requests stay open than waiters still queued. A waiter cannot tell
    /// whether a cell yielded for it or ended on its own, so it does not
    /// take back "its" request; the bound does.
    fn settle_yield_requests(&self) {
        let queued = self.queued.load(Ordering::SeqCst);
        let _ = self
            .yield_requests
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n > queued).then_some(queued)
            });
    }

    pub(crate) fn scope_slots(&self) -> ScopeSlots {
        ScopeSlots {
            slots: Arc::new(Semaphore::new(self.per_scope)),
            queued: AtomicUsize::new(0),
            parked: Arc::default(),
        }
    }

    /// A slot of `scope` and of the process, waiting at most the queue
    /// timeout for each; a scope's queue is at most its share long.
    pub(crate) async fn acquire(&self, scope: &ScopeSlots) -> Result<VmPermit, SlotError> {
        let scope_permit = match Arc::clone(&scope.slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let queued = scope.queued.fetch_add(1, Ordering::SeqCst);
                let _leave = Queued(&scope.queued);
                if queued >= self.per_scope {
                    return Err(SlotError::ScopeBusy {
                        limit: self.per_scope,
                        queued,
                    });
                }
                match tokio::time::timeout(
                    self.queue_timeout,
                    Arc::clone(&scope.slots).acquire_owned(),
                )
                .await
                {
                    Ok(Ok(permit)) => permit,
                    _ => {
                        return Err(SlotError::ScopeBusy {
                            limit: self.per_scope,
                            queued,
                        });
                    }
                }
            }
        };
        let process_permit = match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                self.queued.fetch_add(1, Ordering::SeqCst);
                let leave = Queued(&self.queued);
                self.yield_requests.fetch_add(1, Ordering::SeqCst);
                let got = tokio::time::timeout(
                    self.queue_timeout,
                    Arc::clone(&self.slots).acquire_owned(),
                )
                .await;
                drop(leave);
                self.settle_yield_requests();
                match got {
                    Ok(Ok(permit)) => permit,
                    _ => {
                        return Err(SlotError::ProcessBusy {
                            limit: self.total,
                            waited_ms: self.queue_timeout.as_millis(),
                        });
                    }
                }
            }
        };
        Ok(VmPermit {
            _scope: scope_permit,
            _process: process_permit,
        })
    }

    /// Slots in use now (for tests and metrics).
    pub(crate) fn in_use(&self) -> usize {
        self.total - self.slots.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_scope_cannot_take_every_slot() {
        let process = ProcessSlots::new(4, 2, Duration::from_millis(20), (8, 8));
        let greedy = process.scope_slots();
        let a = process.acquire(&greedy).await.unwrap();
        let b = process.acquire(&greedy).await.unwrap();
        let refused = process.acquire(&greedy).await.err().unwrap();
        assert!(
            matches!(refused, SlotError::ScopeBusy { limit: 2, .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("maxLiveVmsPerSession"));
        let other = process.scope_slots();
        let c = process.acquire(&other).await.unwrap();
        assert_eq!(process.in_use(), 3);
        drop((a, b, c));
        assert_eq!(process.in_use(), 0);
    }

    #[tokio::test]
    async fn a_queued_exec_gets_the_next_free_slot() {
        let process = Arc::new(ProcessSlots::new(1, 1, Duration::from_secs(5), (8, 8)));
        let scope = Arc::new(process.scope_slots());
        let first = process.acquire(&scope).await.unwrap();
        let (p, s) = (Arc::clone(&process), Arc::clone(&scope));
        let waiter = tokio::spawn(async move { p.acquire(&s).await.map(|_| ()) });
        tokio::task::yield_now().await;
        drop(first);
        assert_eq!(waiter.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_full_process_fails_after_the_queue_timeout() {
        let process = ProcessSlots::new(1, 1, Duration::from_millis(10), (8, 8));
        let (one, two) = (process.scope_slots(), process.scope_slots());
        let _held = process.acquire(&one).await.unwrap();
        let refused = process.acquire(&two).await.err().unwrap();
        assert!(
            matches!(refused, SlotError::ProcessBusy { limit: 1, .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("maxLiveVms"));
    }

    /// Waits until `n` execs queue for a process slot.
    async fn until_queued(process: &ProcessSlots, n: usize) {
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while process.queued.load(Ordering::SeqCst) < n {
            assert!(std::time::Instant::now() < until, "{n} never queued");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn each_queued_exec_asks_one_idle_cell_to_yield_until_it_has_a_slot() {
        let process = Arc::new(ProcessSlots::new(2, 2, Duration::from_secs(5), (8, 8)));
        let busy = process.scope_slots();
        let (a, b) = (
            process.acquire(&busy).await.unwrap(),
            process.acquire(&busy).await.unwrap(),
        );
        assert!(!process.take_yield_request(), "nobody waits");
        let waiter = |process: Arc<ProcessSlots>| {
            tokio::spawn(async move {
                let scope = process.scope_slots();
                // The permit goes back to the test, which holds it.
                process.acquire(&scope).await
            })
        };
        let first = waiter(Arc::clone(&process));
        until_queued(&process, 1).await;
        let second = waiter(Arc::clone(&process));
        until_queued(&process, 2).await;
        // One idle cell yields for the first waiter...
        assert!(process.take_yield_request());
        drop(a);
        let first = first.await.unwrap().unwrap();
        // ...and the second waiter's request is still open for another.
        assert!(process.take_yield_request());
        assert!(!process.take_yield_request(), "one request per waiter");
        drop(b);
        let second = second.await.unwrap().unwrap();
        // A waiter served by a cell that ended on its own leaves no request.
        let third = waiter(Arc::clone(&process));
        until_queued(&process, 1).await;
        drop(second);
        let third = third.await.unwrap().unwrap();
        drop(third);
        assert!(
            !process.take_yield_request(),
            "no idle cell yields for nobody"
        );
        drop(first);
    }

    #[test]
    fn parked_cells_are_bounded_per_scope_and_per_process() {
        let process = ProcessSlots::new(2, 2, Duration::from_millis(10), (3, 2));
        let (one, two) = (process.scope_slots(), process.scope_slots());
        let a = process.try_park(&one).expect("first of scope one");
        let _b = process.try_park(&one).expect("second of scope one");
        assert!(process.try_park(&one).is_none(), "scope one's share is 2");
        let _c = process.try_park(&two).expect("scope two parks");
        assert!(process.try_park(&two).is_none(), "the process holds 3");
        assert_eq!(process.parked(), 3);
        // A refused park left no count behind; a resumed cell frees its place.
        drop(a);
        assert_eq!(process.parked(), 2);
        let _d = process.try_park(&two).expect("room again");
        assert!(process.try_park(&one).is_none());
    }
}
