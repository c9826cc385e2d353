//! Requests an upstream server makes of *its* client during a nested call
//! (today: `elicitation/create`, form and URL modes), relayed to the MCP
//! client whose run made the call, and the answer back.
//!
//! Upstream connections are shared by every client session, and MCP does
//! not say on the wire which of a server's requests belongs to which of
//! its in-flight calls. So a request is relayed only when every tool call
//! in flight on that server belongs to one client session; otherwise, or
//! when that client did not declare the capability (or the mode), the
//! server gets an error at once (never a hang, never another client).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use rmcp::model::{ElicitRequestParams, ElicitResult, ErrorCode, ErrorData};
use rmcp::service::{ElicitationMode, Peer, RoleServer};

/// The largest relayed elicitation, question or answer, as JSON (a form's
/// message and flat schema, or a URL, are far smaller).
pub(crate) const MAX_ELICITATION_BYTES: usize = 64 << 10;

/// How long the client gets to answer a relayed elicitation (a person may
/// be filling in a form; past this the upstream gets an error).
pub(crate) const ELICITATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The client sessions of the gateway, by session id: where a relayed
/// request goes.
#[derive(Default)]
pub(crate) struct ClientDirectory {
    sessions: Mutex<HashMap<String, Arc<OnceLock<Peer<RoleServer>>>>>,
    /// Sessions whose client is asked in results (2026-07-28 stateless
    /// requests cannot carry a request of ours): their questions are
    /// posted here, and the request answers them as `input_required`.
    mailboxes: Mutex<HashMap<String, Mailbox>>,
}

/// A question an upstream put to a client that is asked in results, and
/// where its answer goes.
pub(crate) struct Question {
    pub(crate) params: ElicitRequestParams,
    pub(crate) answer: tokio::sync::oneshot::Sender<ElicitResult>,
}

#[derive(Clone)]
struct Mailbox {
    questions: tokio::sync::mpsc::UnboundedSender<Question>,
    modes: HashSet<ElicitationMode>,
}

/// The questions for one session's client, while someone takes them;
/// closing it (drop) makes later questions fail at once.
pub(crate) struct Questions {
    directory: Arc<ClientDirectory>,
    session: String,
    pub(crate) incoming: tokio::sync::mpsc::UnboundedReceiver<Question>,
}

impl Drop for Questions {
    fn drop(&mut self) {
        self.directory
            .mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.session);
    }
}

impl ClientDirectory {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<OnceLock<Peer<RoleServer>>>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A client session opened; `peer` is set once it first calls.
    pub(crate) fn register(&self, session: &str, peer: Arc<OnceLock<Peer<RoleServer>>>) {
        self.lock().insert(session.to_owned(), peer);
    }

    /// A client session ended.
    pub(crate) fn remove(&self, session: &str) {
        self.lock().remove(session);
    }

    /// From now on questions for `session` are posted to the returned
    /// mailbox (its client answers them in its next request), for the
    /// elicitation `modes` the client declared.
    pub(crate) fn ask_in_results(
        self: &Arc<Self>,
        session: &str,
        modes: HashSet<ElicitationMode>,
    ) -> Questions {
        let (questions, incoming) = tokio::sync::mpsc::unbounded_channel();
        self.mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(session.to_owned(), Mailbox { questions, modes });
        Questions {
            directory: Arc::clone(self),
            session: session.to_owned(),
            incoming,
        }
    }

    /// Relays an upstream's elicitation to the client of `sessions` (the
    /// sessions of the server's calls in flight). Question and answer are
    /// each at most [`MAX_ELICITATION_BYTES`], and the client gets
    /// [`ELICITATION_TIMEOUT`] to answer: the upstream is never left
    /// hanging on a client, nor handed an unbounded answer.
    pub(crate) async fn elicit(
        &self,
        server: &str,
        sessions: &[String],
        request: ElicitRequestParams,
    ) -> Result<ElicitResult, ErrorData> {
        self.elicit_within(server, sessions, request, ELICITATION_TIMEOUT)
            .await
    }

    async fn elicit_within(
        &self,
        server: &str,
        sessions: &[String],
        request: ElicitRequestParams,
        timeout: std::time::Duration,
    ) -> Result<ElicitResult, ErrorData> {
        let too_large = |what: &str, bytes: usize| {
            ErrorData::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "codemode gateway: the {what} is {bytes} bytes, over the gateway's limit of {MAX_ELICITATION_BYTES} bytes for a relayed elicitation; ask for less"
                ),
                None,
            )
        };
        let asked = serde_json::to_vec(&request).map_or(usize::MAX, |json| json.len());
        if asked > MAX_ELICITATION_BYTES {
            return Err(too_large(
                &format!("elicitation from MCP server `{server}`"),
                asked,
            ));
        }
        let relayed = tokio::time::timeout(timeout, self.relay(server, sessions, request))
        .await
        .map_err(|_| {
            ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "codemode gateway: the MCP client did not answer MCP server `{server}`'s elicitation within {} s",
                    timeout.as_secs()
                ),
                None,
            )
        })??;
        let answer = serde_json::to_vec(&relayed).map_or(usize::MAX, |json| json.len());
        if answer > MAX_ELICITATION_BYTES {
            return Err(too_large("client's answer to the elicitation", answer));
        }
        Ok(relayed)
    }

    async fn relay(
        &self,
        server: &str,
        sessions: &[String],
        request: ElicitRequestParams,
    ) -> Result<ElicitResult, ErrorData> {
        let refuse =
            |message: String| Err(ErrorData::new(ErrorCode::INVALID_REQUEST, message, None));
        let session = match sessions {
            [] => {
                return refuse(format!(
                    "codemode gateway: elicitation from MCP server `{server}` outside any tool call; nobody to ask"
                ));
            }
            [one] => one,
            _ => {
                return refuse(format!(
                    "codemode gateway: MCP server `{server}` has tool calls of several clients in flight; the gateway cannot tell which one to ask, so it asks none"
                ));
            }
        };
        let (mode, name) = match &request {
            ElicitRequestParams::FormElicitationParams { .. } => (ElicitationMode::Form, "form"),
            ElicitRequestParams::UrlElicitationParams { .. } => (ElicitationMode::Url, "URL"),
            _ => {
                return refuse(format!(
                    "codemode gateway: an elicitation mode from `{server}` this gateway does not relay"
                ));
            }
        };
        let unsupported = || {
            // The protocol's answer to a method the client does not offer.
            Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!(
                    "the MCP client of this run does not support {name} elicitation, so MCP server `{server}` cannot ask its user"
                ),
                None,
            ))
        };
        let mailbox = self
            .mailboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(session)
            .cloned();
        if let Some(mailbox) = mailbox {
            if !mailbox.modes.contains(&mode) {
                return unsupported();
            }
            let (answer, answered) = tokio::sync::oneshot::channel();
            let gone = || {
                ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!(
                        "the MCP client of this run stopped answering (its request ended), so MCP server `{server}` cannot ask its user"
                    ),
                    None,
                )
            };
            mailbox
                .questions
                .send(Question {
                    params: request,
                    answer,
                })
                .map_err(|_| gone())?;
            return answered.await.map_err(|_| gone());
        }
        let peer = self
            .lock()
            .get(session)
            .and_then(|cell| cell.get().cloned());
        let Some(peer) = peer else {
            return Err(no_client(server));
        };
        if !peer.supported_elicitation_modes().contains(&mode) {
            return unsupported();
        }
        peer.create_elicitation(request).await.map_err(|e| {
            ErrorData::new(
                ErrorCode::INTERNAL_ERROR,
                format!("codemode gateway: relaying the elicitation to the client failed: {e}"),
                None,
            )
        })
    }
}

/// No client to ask (`codemode exec` has none; or it left): the
/// protocol's answer for a method nobody offers, as for a client without
/// the capability.
pub(crate) fn no_client(server: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!(
            "no MCP client is connected to the run that made this call (codemode exec has none, or the client left), so MCP server `{server}` cannot ask its user"
        ),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ElicitationSchema;

    fn form() -> ElicitRequestParams {
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "Proceed?".into(),
            requested_schema: ElicitationSchema::builder().build().unwrap(),
        }
    }

    #[tokio::test]
    async fn who_cannot_be_asked_is_told_at_once_with_the_protocol_code() {
        let directory = ClientDirectory::default();
        // `codemode exec`'s session has no client at all: -32601, as for a
        // client without the capability.
        let err = directory
            .elicit("notes", &["cli-42".into()], form())
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::METHOD_NOT_FOUND);
        assert!(
            err.message.contains("no MCP client is connected"),
            "{err:?}"
        );
        // Outside any call, or with several clients' calls in flight: the
        // gateway cannot know whom to ask (an invalid request).
        for sessions in [vec![], vec!["a".to_owned(), "b".to_owned()]] {
            let err = directory
                .elicit("notes", &sessions, form())
                .await
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::INVALID_REQUEST, "{sessions:?}");
        }
    }

    fn asking(modes: &[ElicitationMode]) -> (Arc<ClientDirectory>, Questions) {
        let directory = Arc::new(ClientDirectory::default());
        let questions = directory.ask_in_results("s1", modes.iter().cloned().collect());
        (directory, questions)
    }

    #[tokio::test]
    async fn an_oversized_question_or_answer_is_refused_not_relayed() {
        let (directory, mut questions) = asking(&[ElicitationMode::Form]);
        let huge = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: "x".repeat(MAX_ELICITATION_BYTES),
            requested_schema: ElicitationSchema::builder().build().unwrap(),
        };
        let err = directory
            .elicit("notes", &["s1".into()], huge)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
        assert!(err.message.contains("over the gateway's limit"), "{err:?}");
        assert!(questions.incoming.try_recv().is_err(), "never relayed");

        let answering = tokio::spawn(async move {
            let question = questions.incoming.recv().await.unwrap();
            let content = serde_json::json!({ "note": "y".repeat(MAX_ELICITATION_BYTES) });
            let _ = question.answer.send(
                ElicitResult::new(rmcp::model::ElicitationAction::Accept).with_content(content),
            );
            questions
        });
        let err = directory
            .elicit("notes", &["s1".into()], form())
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
        assert!(err.message.contains("client's answer"), "{err:?}");
        drop(answering.await);
    }

    #[tokio::test]
    async fn a_client_that_never_answers_fails_the_elicitation_at_the_timeout() {
        let (directory, questions) = asking(&[ElicitationMode::Form]);
        let timeout = std::time::Duration::from_millis(100);
        let started = std::time::Instant::now();
        let err = directory
            .elicit_within("notes", &["s1".into()], form(), timeout)
            .await
            .unwrap_err();
        assert!(err.message.contains("did not answer"), "{err:?}");
        assert!(started.elapsed() >= timeout);
        drop(questions);
    }
}
