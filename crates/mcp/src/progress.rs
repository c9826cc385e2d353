//! MCP `notifications/progress` for an `exec`/`wait` whose request carried
//! a progress token: the runtime's [`ProgressUpdate`]s (nested calls
//! started and finished, upstream progress of nested calls, the cell's
//! `progress(...)`) become notifications to the client that asked, at most
//! one per [`MIN_INTERVAL`], the first one interval after the call began
//! (updates in between are folded into the next one, its message naming
//! the latest; only the latest is kept, so a cell reporting in a tight loop
//! costs no memory). A call that ends within its first interval sends
//! none: a quick exec costs nothing for carrying a token. `progress` counts the updates, so
//! it always grows; there is no `total` (a cell's own value and total are
//! in the message).

use std::sync::Arc;
use std::time::Duration;

use codemode_runtime::{ProgressSink, ProgressUpdate};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};

/// The least time between two notifications of one call.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// What the forwarder has not sent yet: only the latest update is kept
/// (a cell reporting in a tight loop costs no memory).
#[derive(Default)]
struct Pending {
    /// Updates reported so far (the notifications' `progress`).
    count: u64,
    latest: Option<ProgressUpdate>,
    /// The call returned: send what is left and stop.
    closed: bool,
}

#[derive(Default)]
struct Shared {
    pending: std::sync::Mutex<Pending>,
    wake: tokio::sync::Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The sink of one `exec`/`wait`: keeps the latest update for the
/// forwarder task, which sends it at most every [`MIN_INTERVAL`]; when the
/// last sink is dropped (the call returned) the forwarder sends what is
/// left and ends, and [`Forwarder::finish`] waits for that before the
/// answer goes out, so no notification follows it.
pub(crate) struct ClientProgress {
    shared: Arc<Shared>,
}

impl ProgressSink for ClientProgress {
    fn report(&self, update: ProgressUpdate) {
        {
            let mut pending = self.shared.lock();
            pending.count += 1;
            pending.latest = Some(update);
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for ClientProgress {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

/// The task sending one call's notifications; it ends telling when it sent
/// its last notification (the call's answer must not overtake it).
pub(crate) struct Forwarder(tokio::task::JoinHandle<Option<tokio::time::Instant>>);

/// How long the answer waits after a last notification: the official
/// TypeScript client dispatches notifications a tick later than
/// responses, so one that arrives in the same read as the answer would
/// find its call gone.
const ANSWER_AFTER: Duration = Duration::from_millis(20);

impl Forwarder {
    /// Waits (briefly) until the last notification is out; a client that
    /// does not read is not waited for.
    pub(crate) async fn finish(self) {
        let mut task = self.0;
        match tokio::time::timeout(Duration::from_millis(250), &mut task).await {
            Ok(Ok(Some(last))) => tokio::time::sleep_until(last + ANSWER_AFTER).await,
            Ok(_) => {}
            Err(_) => task.abort(),
        }
    }
}

impl ClientProgress {
    /// Starts forwarding to `peer` under `token`.
    pub(crate) fn start(
        peer: Peer<RoleServer>,
        token: ProgressToken,
    ) -> (Arc<ClientProgress>, Forwarder) {
        let shared = Arc::new(Shared::default());
        let forwarder = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                // The first notification waits one interval: a call that
                // ends sooner sends none (its answer is its last state),
                // so a quick exec costs nothing for having a token.
                let mut next_at = tokio::time::Instant::now() + MIN_INTERVAL;
                let mut last_sent = None;
                loop {
                    let (count, latest, closed) = loop {
                        let (ready, closed) = {
                            let pending = shared.lock();
                            (pending.latest.is_some(), pending.closed)
                        };
                        if closed || (ready && tokio::time::Instant::now() >= next_at) {
                            let mut pending = shared.lock();
                            break (pending.count, pending.latest.take(), pending.closed);
                        }
                        if ready {
                            // Updates in this interval fold into the next
                            // one; the call's end does not wait for it.
                            tokio::select! {
                                () = tokio::time::sleep_until(next_at) => {}
                                () = shared.wake.notified() => {}
                            }
                        } else {
                            shared.wake.notified().await;
                        }
                    };
                    // At the end, a client that has seen progress sees the
                    // last state too (flushed, not lost).
                    let Some(update) = latest.filter(|_| !closed || last_sent.is_some()) else {
                        return last_sent;
                    };
                    let mut params = ProgressNotificationParam::new(token.clone(), count as f64);
                    params.message = Some(message(&update));
                    if peer.notify_progress(params).await.is_err() {
                        return None;
                    }
                    let now = tokio::time::Instant::now();
                    last_sent = Some(now);
                    if closed {
                        return last_sent;
                    }
                    next_at = now + MIN_INTERVAL;
                }
            })
        };
        (Arc::new(ClientProgress { shared }), Forwarder(forwarder))
    }
}

fn fraction(value: f64, total: Option<f64>) -> String {
    match total {
        Some(total) => format!("{value}/{total}"),
        None => format!("{value}"),
    }
}

/// The text a client shows for one update.
pub(crate) fn message(update: &ProgressUpdate) -> String {
    match update {
        ProgressUpdate::CallStarted { tool_id, .. } => format!("calling {tool_id}"),
        ProgressUpdate::CallFinished { tool_id, ok, .. } => {
            format!("{tool_id} {}", if *ok { "answered" } else { "failed" })
        }
        ProgressUpdate::Call {
            tool_id,
            progress,
            total,
            message,
            ..
        } => match message {
            Some(m) => format!("{tool_id}: {m} ({})", fraction(*progress, *total)),
            None => format!("{tool_id}: {}", fraction(*progress, *total)),
        },
        ProgressUpdate::Cell {
            value,
            total,
            message,
        } => match message {
            Some(m) => format!("{m} ({})", fraction(*value, *total)),
            None => format!("cell progress {}", fraction(*value, *total)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_tool_and_the_fraction() {
        assert_eq!(
            message(&ProgressUpdate::CallStarted {
                call_id: "c".into(),
                tool_id: "mcp:a:b".into()
            }),
            "calling mcp:a:b"
        );
        assert_eq!(
            message(&ProgressUpdate::Call {
                call_id: "c".into(),
                tool_id: "mcp:a:b".into(),
                progress: 2.0,
                total: Some(4.0),
                message: Some("copying".into())
            }),
            "mcp:a:b: copying (2/4)"
        );
        assert_eq!(
            message(&ProgressUpdate::Cell {
                value: 0.5,
                total: None,
                message: None
            }),
            "cell progress 0.5"
        );
    }
}
