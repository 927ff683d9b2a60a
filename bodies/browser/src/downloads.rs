//! Downloads a page made: each finished one is staged in the session's profile, answered for
//! the executor to land in the walls.

use aido_actions::Failure;
use aido_browser::Browser;
use serde_json::{Value, json};

/// How long a call waits for a download that has begun to finish.
pub const DOWNLOAD_WAIT_MS: u64 = 30_000;

/// The downloads that finished since the last look (waiting for those that have begun), as
/// `{guid, url, name, bytes, staged}` or `{guid, error: {code, message}}`.
pub(crate) async fn settle(browser: &mut Browser) -> Vec<Value> {
    browser
        .settle_downloads(DOWNLOAD_WAIT_MS)
        .await
        .into_iter()
        .map(|finished| match finished {
            Ok(d) => json!({
                "guid": d.guid,
                "url": d.url,
                "name": d.suggested_filename,
                "bytes": d.bytes,
                "staged": d.path,
            }),
            Err(e) => {
                let guid = match &e {
                    aido_browser::BrowserError::DownloadFailed { guid, .. } => guid.clone(),
                    _ => String::new(),
                };
                let failure = Failure::from(e);
                json!({"guid": guid, "error": {"code": failure.code, "message": failure.message}})
            }
        })
        .collect()
}
