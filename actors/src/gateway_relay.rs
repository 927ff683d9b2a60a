//! What a downstream server asks of the agent's side while one of its tools runs: its
//! progress goes to the call's progress hook, its form questions to the call's asker (the
//! agent's client, by MCP elicitation), each answer back to the server. A surface that cannot
//! ask gets the question cancelled; a URL elicitation is declined (aido relays forms only).

use std::sync::Arc;
use std::time::Duration;

use aido_body_gateway::{Answered, elicit_result, form_of};
use aido_context::hooks::{Asker, Elicited, Progress};
use aido_gateway::{BoxFuture, ElicitRequestParams, ElicitResult, Upstream};

/// How long a downstream's question waits for the person.
const ELICIT_TIMEOUT: Duration = Duration::from_secs(600);

/// The call's hooks, for the downstream.
pub(crate) struct Relay {
    pub(crate) progress: Option<Arc<dyn Progress>>,
    pub(crate) asker: Option<Arc<dyn Asker>>,
}

impl Upstream for Relay {
    fn progress(&self, progress: aido_gateway::Progress) -> BoxFuture<'_, ()> {
        if let Some(hook) = &self.progress {
            let total = progress.total.unwrap_or(0.0);
            let message = progress
                .message
                .unwrap_or_else(|| format!("{} is working", progress.server));
            hook.report(progress.progress as u64, total as u64, message);
        }
        Box::pin(std::future::ready(()))
    }

    fn elicit(&self, server: &str, request: ElicitRequestParams) -> BoxFuture<'_, ElicitResult> {
        let Some((message, schema)) = form_of(&request) else {
            return Box::pin(std::future::ready(aido_gateway::declined()));
        };
        let Some(asker) = self.asker.clone().filter(|asker| asker.can_ask()) else {
            return Box::pin(std::future::ready(elicit_result(Answered::Cancelled)));
        };
        let message = format!("downstream {server:?} asks: {message}");
        Box::pin(async move {
            let answer = match asker.ask(message, schema, ELICIT_TIMEOUT).await {
                Elicited::Accepted(content) => Answered::Accepted(content),
                Elicited::Declined => Answered::Declined,
                Elicited::Cancelled | Elicited::TimedOut | Elicited::Unavailable => {
                    Answered::Cancelled
                }
            };
            elicit_result(answer)
        })
    }
}
