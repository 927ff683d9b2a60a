//! Where a connection's calls run ([`Place`]), and the places of 2026-07-28 HTTP requests,
//! shared per bearer and endpoint ([`Stateless`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aido_actors::{Runtime, Session};
use tokio::sync::OnceCell;

/// Where a connection's calls run: its aido session (opened on first use), the calls waiting
/// for their client's `inputResponses` (2026-07-28), and its `subscriptions/listen` streams.
/// A stdio connection and a legacy HTTP session each have one; over HTTP, 2026-07-28 requests
/// (which carry no session id) share one per bearer and endpoint ([`crate::http::Stateless`]).
pub(crate) struct Place {
    pub(crate) session: Arc<OnceCell<Session>>,
    pub(crate) pending: crate::mrtr::Pending,
    pub(crate) listeners: Arc<crate::listen::Listeners>,
}

impl Place {
    /// An empty place; its rounds are sealed under a key from the runtime's random facade.
    pub(crate) fn new(runtime: &Runtime) -> Self {
        let mut key = [0u8; crate::mrtr::KEY_BYTES];
        runtime.clock().random(&mut key);
        Self {
            session: Arc::new(OnceCell::new()),
            pending: crate::mrtr::Pending::new(key),
            listeners: Arc::default(),
        }
    }

    /// Whether nothing waits here: no round for its client and no listen stream.
    pub(crate) fn idle(&self) -> bool {
        self.pending.is_empty() && self.listeners.is_empty()
    }
}

/// Places of 2026-07-28 requests held at once; past it the longest idle one is closed first.
pub(crate) const STATELESS_PLACES_MAX: usize = 256;

/// Who a 2026-07-28 request's place is for: its grant's token (none for the operator) and the
/// endpoint (`/`, or `/x/TOOLSETS`).
pub(crate) type PlaceKey = (Option<Arc<str>>, String);

/// The places of 2026-07-28 requests, by bearer and endpoint.
pub(crate) struct Stateless {
    pub(crate) places: Mutex<HashMap<PlaceKey, (Arc<Place>, Instant)>>,
    pub(crate) idle: Duration,
    /// Wakes the sweeper when the places pass their bound between two sweeps.
    pub(crate) over: tokio::sync::Notify,
}

impl Stateless {
    /// The place of `bearer` on `endpoint`, made on first use.
    pub(crate) fn place(
        &self,
        runtime: &Runtime,
        bearer: Option<Arc<str>>,
        endpoint: String,
    ) -> Arc<Place> {
        let mut places = self.places.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let entry = places
            .entry((bearer, endpoint))
            .or_insert_with(|| (Arc::new(Place::new(runtime)), now));
        entry.1 = now;
        let place = entry.0.clone();
        // Many new bearers or endpoints between two sweeps: the sweeper closes the longest
        // idle ones now (it alone closes, since closing is journaled and async).
        if places.len() > STATELESS_PLACES_MAX {
            self.over.notify_one();
        }
        place
    }

    /// Take the places idle past `idle` (all of them when `all`), and the longest idle ones
    /// past [`STATELESS_PLACES_MAX`].
    pub(crate) fn take_idle(&self, all: bool) -> Vec<Arc<Place>> {
        let mut places = self.places.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let mut gone = Vec::new();
        places.retain(|_, (place, used)| {
            // Held elsewhere: a request is being answered in it.
            let busy = Arc::strong_count(place) > 1 || !place.idle();
            let keep = !all && (busy || now.duration_since(*used) < self.idle);
            if !keep {
                gone.push(place.clone());
            }
            keep
        });
        while places.len() > STATELESS_PLACES_MAX {
            let oldest = places
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(key, _)| key.clone());
            match oldest.and_then(|key| places.remove(&key)) {
                Some((place, _)) => gone.push(place),
                None => break,
            }
        }
        gone
    }
}

/// Close the aido sessions of `places`, journaling `reason`.
pub(crate) async fn close(places: Vec<Arc<Place>>, reason: &Mutex<String>) {
    let reason = reason
        .lock()
        .map(|r| r.clone())
        .unwrap_or_else(|_| crate::versions::HTTP_SESSION_ENDED.to_owned());
    for place in places {
        if let Some(session) = place.session.get() {
            session.close(&reason).await;
        }
    }
}

/// The capability grant token a request was authenticated with, put in the request's
/// extensions by the server in front (`aido serve`): the MCP session that request opens runs
/// under that grant, and [`crate::AidoServer`] refuses the session to requests with another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantBearer(pub Arc<str>);
