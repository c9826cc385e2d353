//! The epoch ticker: one thread per [`crate::Sandbox`] that advances the
//! engine's epoch every millisecond while any VM is running, and sleeps
//! otherwise. Each store checks its own wall-clock deadline when the epoch
//! moves, so deadlines are accurate to about a tick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use wasmtime::Engine;

const TICK: Duration = Duration::from_millis(1);

struct Shared {
    running: Mutex<usize>,
    wake: Condvar,
    stop: AtomicBool,
}

pub(crate) struct Ticker {
    shared: Arc<Shared>,
}

impl Ticker {
    pub(crate) fn start(engine: Engine) -> std::io::Result<Ticker> {
        let shared = Arc::new(Shared {
            running: Mutex::new(0),
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
        let mut n = self
            .shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *n += 1;
        if *n == 1 {
            self.shared.wake.notify_one();
        }
        RunningGuard {
            shared: &self.shared,
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
    }
}

pub(crate) struct RunningGuard<'a> {
    shared: &'a Shared,
}

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        let mut n = self
            .shared
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
    }
}

fn tick_loop(engine: &Engine, shared: &Shared) {
    loop {
        {
            let mut n = shared
                .running
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            while *n == 0 && !shared.stop.load(Ordering::SeqCst) {
                n = shared.wake.wait(n).unwrap_or_else(PoisonError::into_inner);
            }
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(TICK);
        engine.increment_epoch();
    }
}
