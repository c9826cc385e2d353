//! Wakes the threads of this process that wait for a run's results.
//!
//! A backend calls [`Notifier::notify`] when a result for a run is stored
//! (the file backend on its own write, the Redis backend when pub/sub
//! delivers another process's write). Waiters re-read the store after each
//! wake, so a lost or spurious wake costs one read, never a result.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(crate) struct Notifier {
    /// Per run with waiters: (results arrived since, waiters).
    ticks: Mutex<HashMap<String, (u64, usize)>>,
    arrived: Condvar,
}

impl Notifier {
    pub(crate) fn notify(&self, run_id: &str) {
        let mut ticks = self.ticks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((n, _)) = ticks.get_mut(run_id) {
            *n += 1;
            self.arrived.notify_all();
        }
    }

    /// Calls `read` until it yields a value or `timeout` passes, sleeping
    /// between reads until a notification for `run_id` (or `recheck`, so a
    /// notification lost with a dropped connection delays, never loses).
    pub(crate) fn wait_for<T, E>(
        &self,
        run_id: &str,
        timeout: Duration,
        recheck: Duration,
        mut read: impl FnMut() -> Result<Option<T>, E>,
    ) -> Result<Option<T>, E> {
        let deadline = Instant::now() + timeout;
        self.ticks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(run_id.to_owned())
            .or_insert((0, 0))
            .1 += 1;
        let result = loop {
            let seen = self.tick(run_id);
            match read() {
                Ok(Some(value)) => break Ok(Some(value)),
                Err(e) => break Err(e),
                Ok(None) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                break Ok(None);
            }
            let until = (deadline - now).min(recheck);
            let ticks = self.ticks.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = self
                .arrived
                .wait_timeout_while(ticks, until, |t| t.get(run_id).map(|e| e.0) == Some(seen));
        };
        let mut ticks = self.ticks.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = ticks.get_mut(run_id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                ticks.remove(run_id);
            }
        }
        result
    }

    fn tick(&self, run_id: &str) -> u64 {
        let ticks = self.ticks.lock().unwrap_or_else(PoisonError::into_inner);
        ticks.get(run_id).map_or(0, |e| e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_notification_wakes_a_waiter_before_its_recheck() {
        let notifier = Arc::new(Notifier::default());
        let value = Arc::new(Mutex::new(None::<u32>));
        let (n, v) = (Arc::clone(&notifier), Arc::clone(&value));
        let waiter = std::thread::spawn(move || {
            let started = Instant::now();
            let got = n.wait_for(
                "r",
                Duration::from_secs(30),
                Duration::from_secs(30),
                || Ok::<_, ()>(*v.lock().unwrap_or_else(PoisonError::into_inner)),
            );
            (got, started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        *value.lock().unwrap_or_else(PoisonError::into_inner) = Some(7);
        notifier.notify("r");
        let (got, took) = waiter.join().unwrap_or((Err(()), Duration::MAX));
        assert_eq!(got, Ok(Some(7)));
        assert!(
            took < Duration::from_secs(20),
            "woken by the notification, not the recheck"
        );
        assert!(
            notifier
                .ticks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
        );
    }
}
