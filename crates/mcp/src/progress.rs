//! MCP `notifications/progress` for an `exec`/`wait` whose request carried
//! a progress token: the runtime's [`ProgressUpdate`]s (nested calls
//! started and finished, upstream progress of nested calls, the cell's
//! `progress(...)`) become notifications to the client that asked, at most
//! one per [`MIN_INTERVAL`] (updates in between are folded into the next
//! one, its message naming the latest). `progress` counts the updates, so
//! it always grows; there is no `total` (a cell's own value and total are
//! in the message).

use std::sync::Arc;
use std::time::Duration;

use codemode_runtime::{ProgressSink, ProgressUpdate};
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use tokio::sync::mpsc;

/// The least time between two notifications of one call.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// The sink of one `exec`/`wait`: queues updates for the forwarder task,
/// which sends what is left and ends once every sink is dropped (the call
/// returned); [`Forwarder::finish`] waits for that before the answer goes
/// out, so no notification follows it.
pub(crate) struct ClientProgress {
    updates: mpsc::UnboundedSender<ProgressUpdate>,
}

/// The task sending one call's notifications.
pub(crate) struct Forwarder(tokio::task::JoinHandle<()>);

impl Forwarder {
    /// Waits (briefly) until the last notification is out; a client that
    /// does not read is not waited for.
    pub(crate) async fn finish(self) {
        let mut task = self.0;
        if tokio::time::timeout(Duration::from_millis(250), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
    }
}

impl ProgressSink for ClientProgress {
    fn report(&self, update: ProgressUpdate) {
        let _ = self.updates.send(update);
    }
}

impl ClientProgress {
    /// Starts forwarding to `peer` under `token`.
    pub(crate) fn start(
        peer: Peer<RoleServer>,
        token: ProgressToken,
    ) -> (Arc<ClientProgress>, Forwarder) {
        let (updates, mut rx) = mpsc::unbounded_channel::<ProgressUpdate>();
        let forwarder = tokio::spawn(async move {
            let mut count: u64 = 0;
            let mut last_sent: Option<tokio::time::Instant> = None;
            while let Some(first) = rx.recv().await {
                count += 1;
                let mut latest = first;
                // Fold what arrives before the interval is over.
                if let Some(at) = last_sent {
                    let until = at + MIN_INTERVAL;
                    loop {
                        tokio::select! {
                            more = rx.recv() => match more {
                                Some(update) => { count += 1; latest = update; }
                                None => break,
                            },
                            _ = tokio::time::sleep_until(until) => break,
                        }
                    }
                }
                let mut params = ProgressNotificationParam::new(token.clone(), count as f64);
                params.message = Some(message(&latest));
                if peer.notify_progress(params).await.is_err() {
                    return;
                }
                last_sent = Some(tokio::time::Instant::now());
            }
        });
        (Arc::new(ClientProgress { updates }), Forwarder(forwarder))
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
