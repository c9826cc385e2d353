//! The epoch ticker: one thread per [`crate::Sandbox`] that advances the
//! engine's epoch every millisecond while any VM is running, and sleeps
//! otherwise. Each store checks its own wall-clock deadline when the epoch
//! moves, so deadlines are accurate to about a tick.
//!
//! Entering a VM is on the hot path of every nested tool call (each result
//! is a VM entry), so it costs one atomic add: the ticker is woken (a
//! futex call) only when it is actually parked, and it parks only after
//! `LINGER` without any VM running, not between the entries of a busy run.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use wasmtime::Engine;

const TICK: Duration = Duration::from_millis(1);
/// Idle ticks before the ticker parks.
const LINGER_TICKS: u32 = 20;

struct Shared {
    /// VMs running right now.
    running: AtomicUsize,
    /// Set by the ticker before it waits; a VM entry that sees it wakes it.
    parked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

pub(crate) struct Ticker {
    shared: Arc<Shared>,
}

impl Ticker {
    pub(crate) fn start(engine: Engine) -> std::io::Result<Ticker> {
        let shared = Arc::new(Shared {
            running: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("codemode-epoch".into())
            .spawn(move || tick_loop(&engine, &thread_shared))?;
        Ok(Ticker { shared })
    }

    /// Marks a VM as running until the guard drops.
    pub(crate) fn running(&self) -> RunningGuard<'_> {
        let shared = &self.shared;
        shared.running.fetch_add(1, Ordering::SeqCst);
        if shared.parked.load(Ordering::SeqCst) {
            // Taking the lock orders this wake after the ticker's re-check
            // of `running`, so the wake cannot be lost.
            let _guard = shared.lock.lock().unwrap_or_else(PoisonError::into_inner);
            shared.wake.notify_one();
        }
        RunningGuard { shared }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _guard = self
            .shared
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.shared.wake.notify_all();
    }
}

pub(crate) struct RunningGuard<'a> {
    shared: &'a Shared,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        self.shared.running.fetch_sub(1, Ordering::SeqCst);
    }
}

fn tick_loop(engine: &Engine, shared: &Shared) {
    let mut idle = 0u32;
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        if shared.running.load(Ordering::SeqCst) > 0 {
            idle = 0;
        } else {
            idle += 1;
        }
        if idle > LINGER_TICKS {
            let mut guard = shared.lock.lock().unwrap_or_else(PoisonError::into_inner);
            shared.parked.store(true, Ordering::SeqCst);
            while shared.running.load(Ordering::SeqCst) == 0 && !shared.stop.load(Ordering::SeqCst)
            {
                guard = shared
                    .wake
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            shared.parked.store(false, Ordering::SeqCst);
            drop(guard);
            idle = 0;
            continue;
        }
        std::thread::sleep(TICK);
        engine.increment_epoch();
    }
}
