//! Judging a target: the allowlist, the name's resolution (bounded in time and in resolver
//! threads), every address's range, and the connect to an address that passed.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use aido_net::{Host, NetPolicy, Target};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::time::{Instant, timeout_at};

use super::{
    EGRESS_ADDRESSES_TRIED_MAX, EGRESS_CONNECT_TIMEOUT_MS, EGRESS_RESOLUTIONS_TOTAL_MAX,
    EGRESS_RESOLVE_TIMEOUT_MS, ProxyError,
};

/// The resolver threads of the whole process: a permit is held for as long as the C library's
/// call runs, which no deadline can cut short.
static RESOLUTIONS: LazyLock<Arc<Semaphore>> =
    LazyLock::new(|| Arc::new(Semaphore::new(EGRESS_RESOLUTIONS_TOTAL_MAX)));

/// Judges `host:port` by the allowlist, resolves a name (`resolvers`: the command's own
/// permits) and judges each address: the addresses that passed.
pub(super) async fn admit(
    policy: &NetPolicy,
    grant: Option<&NetPolicy>,
    resolvers: &Arc<Semaphore>,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, ProxyError> {
    let target = Target::tcp(host, port).map_err(ProxyError::Net)?;
    let admitted = policy.admit(&target).map_err(ProxyError::Net)?;
    if let Some(grant) = grant
        && grant.admit(&target).is_err()
    {
        return Err(ProxyError::NotGranted {
            host: host.to_owned(),
            port,
        });
    }
    let addresses = match &admitted.target.host {
        Host::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, port)]),
        Host::Domain(name) => resolve(resolvers, name, port).await?,
    };
    let mut passed = Vec::new();
    let mut refusal = None;
    for ip in addresses {
        match policy.check_address(host, ip) {
            Ok(()) => passed.push(SocketAddr::new(ip, port)),
            Err(error) => refusal = Some(ProxyError::Net(error)),
        }
    }
    if passed.is_empty() {
        return Err(refusal.unwrap_or(ProxyError::ResolveFailed {
            host: host.to_owned(),
            why: "no address".into(),
        }));
    }
    Ok(passed)
}

/// The addresses of `name`, within [`EGRESS_RESOLVE_TIMEOUT_MS`] (the wait for a permit of the
/// command and one of the process included). `getaddrinfo` blocks a thread and cannot be
/// cancelled, so the permits go with that thread and come back when the C library answers:
/// a resolver that hangs past the deadline still counts, and no more threads than permits
/// ever wait on one.
async fn resolve(
    resolvers: &Arc<Semaphore>,
    name: &str,
    port: u16,
) -> Result<Vec<IpAddr>, ProxyError> {
    let deadline = Instant::now() + Duration::from_millis(EGRESS_RESOLVE_TIMEOUT_MS);
    let late = || ProxyError::ResolveTimeout {
        host: name.to_owned(),
    };
    let failed = |why: String| ProxyError::ResolveFailed {
        host: name.to_owned(),
        why,
    };
    let own = timeout_at(deadline, Arc::clone(resolvers).acquire_owned())
        .await
        .map_err(|_| late())?
        .map_err(|error| failed(error.to_string()))?;
    let all = timeout_at(deadline, Arc::clone(&RESOLUTIONS).acquire_owned())
        .await
        .map_err(|_| late())?
        .map_err(|error| failed(error.to_string()))?;
    let lookup = {
        let name = name.to_owned();
        tokio::task::spawn_blocking(move || {
            let _permits = (own, all);
            (name.as_str(), port)
                .to_socket_addrs()
                .map(|found| found.map(|address| address.ip()).collect::<Vec<_>>())
        })
    };
    match timeout_at(deadline, lookup).await {
        Err(_) => Err(late()),
        Ok(Err(error)) => Err(failed(error.to_string())),
        Ok(Ok(Err(error))) => Err(failed(error.to_string())),
        Ok(Ok(Ok(addresses))) => Ok(addresses),
    }
}

/// Connects to the first of `addresses` that answers, in the resolver's order, all of them
/// within one [`EGRESS_CONNECT_TIMEOUT_MS`] (a black-holed address hangs in connect until
/// then) and at most [`EGRESS_ADDRESSES_TRIED_MAX`] of them.
pub(super) async fn connect(
    host: &str,
    addresses: &[SocketAddr],
) -> Result<(SocketAddr, TcpStream), ProxyError> {
    let deadline = Instant::now() + Duration::from_millis(EGRESS_CONNECT_TIMEOUT_MS);
    let mut failures = Vec::new();
    for address in addresses.iter().take(EGRESS_ADDRESSES_TRIED_MAX) {
        match timeout_at(deadline, TcpStream::connect(address)).await {
            Ok(Ok(upstream)) => return Ok((*address, upstream)),
            Ok(Err(error)) => failures.push(format!("{address}: {error}")),
            Err(_) => {
                let tried = match failures.is_empty() {
                    true => String::new(),
                    false => format!(" (after {})", failures.join("; ")),
                };
                return Err(ProxyError::ConnectTimeout {
                    host: host.to_owned(),
                    tried,
                });
            }
        }
    }
    Err(ProxyError::ConnectFailed {
        tried: failures.join("; "),
    })
}
