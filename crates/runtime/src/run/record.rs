//! Run records: what of a waiting run goes to the run store
//! ([`RunBackend`]: this process's memory, the embedded file store, Redis),
//! and how a run comes back from it in a process that has none of its live
//! state (after a restart, or on another replica).
//!
//! The store is the authority on which runs exist and who may resume them:
//! every `wait` claims the run there first. The process that suspended a
//! run keeps its live state beside it ([`crate::run::live::LiveRuns`]); a
//! process whose live copy is older than the store's generation drops it
//! (its calls keep running and write their results to the store).
//!
//! A record is `CMR1`, the length of a JSON header, the header (counters,
//! yields, carried results, calls in flight with the process running them,
//! the TypeScript source, held result handles) and the snapshot's own
//! persisted form (build id checked on restore). A store that does not
//! outlive the process gets [`LIVE_ONLY`] instead: its runs are only ever
//! resumed from their live copy.

use std::sync::Arc;
use std::time::Duration;

use codemode_sandbox::Settlement;
use codemode_store::RunBackend;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::control::HeldInput;
use crate::executor::ToolCallError;
use crate::run::sink::{decode_outcome, interrupted_call};
use crate::run::state::{RunInfo, RunState};

/// The run store and the bounds that hold over it.
pub(crate) struct Store {
    pub(crate) backend: Arc<dyn RunBackend>,
    pub(crate) bounds: codemode_store::Bounds,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum StoredSettlement {
    Resolve(Value),
    ResolveJson(String),
    Reject {
        message: String,
        code: Option<String>,
    },
}

impl From<&Settlement> for StoredSettlement {
    fn from(s: &Settlement) -> StoredSettlement {
        match s {
            Settlement::Resolve(v) => StoredSettlement::Resolve(v.clone()),
            Settlement::ResolveJson(t) => StoredSettlement::ResolveJson(t.clone()),
            Settlement::Reject { message, code } => StoredSettlement::Reject {
                message: message.clone(),
                code: code.clone(),
            },
        }
    }
}

impl From<StoredSettlement> for Settlement {
    fn from(s: StoredSettlement) -> Settlement {
        match s {
            StoredSettlement::Resolve(v) => Settlement::Resolve(v),
            StoredSettlement::ResolveJson(t) => Settlement::ResolveJson(t),
            StoredSettlement::Reject { message, code } => Settlement::Reject { message, code },
        }
    }
}

/// A call in flight when the run was stored.
#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PendingCall {
    pub(crate) request_id: u32,
    pub(crate) call_id: String,
    pub(crate) tool_id: String,
    pub(crate) method: String,
    /// The process running it.
    pub(crate) instance: String,
    /// Held for approval (not started): what the call runs with once
    /// approved, so another process can ask again and run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) held: Option<HeldInput>,
}

/// Everything of a run but its snapshot.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunRecord {
    pub(crate) parent_call_id: String,
    pub(crate) language: Option<String>,
    pub(crate) info: RunInfo,
    pub(crate) yields: Vec<u32>,
    carried: Vec<(u32, StoredSettlement)>,
    pub(crate) pending: Vec<PendingCall>,
    pub(crate) typescript: Option<String>,
    pub(crate) handle_nonce: String,
    pub(crate) handles: Vec<Value>,
    /// Who may resume it (the store checks it on claim too).
    pub(crate) owner_key: String,
    /// The cell's value if it returned before its last calls settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) returned: Option<Value>,
}

impl RunRecord {
    pub(crate) fn carried(&mut self) -> impl Iterator<Item = (u32, Settlement)> + '_ {
        self.carried.drain(..).map(|(id, s)| (id, s.into()))
    }

    pub(crate) fn run_info(&self) -> RunInfo {
        RunInfo {
            language: self
                .language
                .as_deref()
                .and_then(crate::config::Language::parse),
            ..self.info.clone()
        }
    }
}

const MAGIC: &[u8; 4] = b"CMR1";

/// The record of a run in a store that does not outlive the process
/// ([`RunBackend::outlives_process`]): its live copy is all there is.
pub(crate) const LIVE_ONLY: &[u8; 4] = b"CMR0";

/// The record of a waiting run, with `snapshot` (its persisted form).
pub(crate) fn encode(state: &RunState, snapshot: &[u8], instance: &str) -> Vec<u8> {
    let i = &state.info;
    let (handle_nonce, handles) = state.handles.export();
    let record = RunRecord {
        parent_call_id: state.parent_call_id.clone(),
        language: i.language.map(|l| l.as_str().to_owned()),
        info: i.clone(),
        yields: state.yields.clone(),
        carried: state
            .carried
            .iter()
            .map(|(id, s)| (*id, StoredSettlement::from(s)))
            .collect(),
        pending: state
            .calls
            .pending_by_request()
            .map(|(request_id, c)| PendingCall {
                request_id,
                call_id: c.info.call_id.clone(),
                tool_id: c.info.tool_id.clone(),
                method: c.info.method.to_owned(),
                instance: instance.to_owned(),
                held: c
                    .info
                    .gate
                    .as_ref()
                    .filter(|g| g.awaiting_approval())
                    .and_then(|g| g.held().cloned()),
            })
            .collect(),
        typescript: state.source_map.as_ref().map(|t| t.source().to_owned()),
        handle_nonce,
        handles,
        owner_key: state.owner_key.to_string(),
        returned: state.returned.clone(),
    };
    let header = serde_json::to_vec(&record).unwrap_or_default();
    let mut out = Vec::with_capacity(8 + header.len() + snapshot.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(snapshot);
    out
}

/// The record and the snapshot bytes, or why the bytes are no record.
pub(crate) fn decode(bytes: &[u8]) -> Result<(RunRecord, &[u8]), String> {
    if bytes == LIVE_ONLY {
        return Err(
            "the run store keeps this run only as the live copy of the process that suspended it, and that copy is gone".into(),
        );
    }
    if bytes.get(..4) != Some(MAGIC.as_slice()) {
        return Err("not a codemode run record (another format or version)".into());
    }
    let len = bytes
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("a truncated run record")? as usize;
    let header = bytes
        .get(8..8usize.saturating_add(len))
        .ok_or("a truncated run record")?;
    let record: RunRecord =
        serde_json::from_slice(header).map_err(|e| format!("a damaged run record: {e}"))?;
    Ok((record, &bytes[8 + len..]))
}

/// The `method` of a restored call, as the static name calls carry.
pub(crate) fn static_method(method: &str) -> &'static str {
    crate::catalog::guest_api::McpOp::ALL
        .into_iter()
        .map(|op| op.method().as_str())
        .find(|m| *m == method)
        .unwrap_or("call")
}

/// Waits in the durable store for the result of a call another process
/// runs; `interrupted` once that process is gone. Runs on a blocking
/// thread; stops when `cancelled` is set (the run ended).
pub(crate) fn await_remote(
    backend: &Arc<dyn RunBackend>,
    run_id: &str,
    call: &PendingCall,
    cancelled: &std::sync::atomic::AtomicBool,
) -> Result<Value, ToolCallError> {
    follow(backend, run_id, call.request_id, &call.instance, cancelled)
        .unwrap_or_else(|| Err(interrupted_call(&call.tool_id)))
}

/// Waits in the durable store for the result of call `request_id` while
/// process `instance` lives; `None` once it is gone without one.
pub(crate) fn follow(
    backend: &Arc<dyn RunBackend>,
    run_id: &str,
    request_id: u32,
    instance: &str,
    cancelled: &std::sync::atomic::AtomicBool,
) -> Option<Result<Value, ToolCallError>> {
    use std::sync::atomic::Ordering;
    let mut unreachable_since: Option<std::time::Instant> = None;
    while !cancelled.load(Ordering::Relaxed) {
        match backend.await_result(run_id, request_id, Duration::from_millis(500)) {
            Ok(Some(bytes)) => return Some(decode_outcome(&bytes)),
            Ok(None) => {
                unreachable_since = None;
                if !backend.instance_alive(instance) {
                    // It may have written the result just before it died.
                    return match backend.await_result(run_id, request_id, Duration::ZERO) {
                        Ok(Some(bytes)) => Some(decode_outcome(&bytes)),
                        _ => None,
                    };
                }
            }
            Err(e) => {
                let since = *unreachable_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > Duration::from_secs(30) {
                    return Some(Err(ToolCallError::new(format!(
                        "the result of this call cannot be read: {e}; it may or may not have taken effect"
                    ))));
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        }
    }
    Some(Err(ToolCallError::new(
        "the run ended before the call answered",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::sink::encode_outcome;

    #[test]
    fn outcomes_round_trip_and_damaged_ones_are_interrupted() {
        for outcome in [
            Ok(serde_json::json!({"content": [{"type": "text", "text": "hi"}]})),
            Err(ToolCallError::new("boom")),
            Err(ToolCallError::denied("no")),
            Err(ToolCallError::interrupted("gone")),
        ] {
            assert_eq!(decode_outcome(&encode_outcome(&outcome)), outcome);
        }
        let damaged = decode_outcome(b"{not json");
        assert!(damaged.is_err_and(|e| e.is_interrupted()));
    }

    proptest::proptest! {
        /// Records come from a store other processes (or an attacker with
        /// access to Redis) write: any bytes are refused or read, never a
        /// panic.
        #[test]
        fn arbitrary_bytes_never_panic_the_decoders(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
        ) {
            let _ = decode(&bytes);
            let _ = decode_outcome(&bytes);
            let mut framed = b"CMR1".to_vec();
            framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
        }

        #[test]
        fn outcomes_round_trip(text in ".{0,64}", denied in proptest::prelude::any::<bool>()) {
            let outcome: Result<Value, ToolCallError> = if denied {
                Err(ToolCallError::denied(text.clone()))
            } else {
                Ok(serde_json::json!({ "text": text }))
            };
            proptest::prop_assert_eq!(decode_outcome(&encode_outcome(&outcome)), outcome);
        }
    }

    #[test]
    fn records_that_are_not_ours_are_refused() {
        assert!(decode(b"").is_err());
        assert!(decode(b"CMR1").is_err());
        assert!(decode(b"CMR1\xff\xff\xff\x7f{}").is_err());
        assert!(decode(b"XXXX\x02\x00\x00\x00{}").is_err());
    }
}
