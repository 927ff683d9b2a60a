//! aido-browser against Debian's Chromium, one integration-test binary. Pages come from a
//! small server of the test's own on 127.0.0.1, and every request goes through a recording
//! HTTP proxy of the test's own: what the server saw, the proxy saw first.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

mod support;

use std::time::{Duration, Instant};

use aido_browser::{Browser, BrowserError, Locator, Options};
use support::{Fixture, fixture, reference};

const WAIT_MS: u64 = 10_000;

/// The login form is filled and submitted by reference, the welcome text is found, and
/// every request the server answered (the page, its stylesheet, the form's POST) went
/// through the proxy, loopback though it is.
#[tokio::test]
async fn login_form_through_the_proxy() {
    let Some(Fixture {
        mut browser,
        site,
        proxy,
        ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    let started = Instant::now();
    browser.navigate(&site.url("/")).await.unwrap();
    let navigated = started.elapsed();
    let text = browser.text().await.unwrap();
    eprintln!(
        "timing: navigate {navigated:?}, navigate+text {:?}",
        started.elapsed()
    );
    assert!(text.text.contains("Sign in"), "{text:?}");

    let snapshot = browser.snapshot().await.unwrap();
    let user = reference(&snapshot, "textbox", "User name");
    let filled = browser.fill(&user, "alice").await.unwrap();
    assert_eq!(filled.value, "alice");
    browser
        .fill(&reference(&snapshot, "textbox", "Password"), "secret")
        .await
        .unwrap();
    let chosen = browser
        .select(&reference(&snapshot, "combobox", "Role"), "Operator")
        .await
        .unwrap();
    assert_eq!(chosen.value, "ops");
    browser
        .click(&reference(&snapshot, "button", "Sign in"))
        .await
        .unwrap();
    browser
        .wait_for_text("Welcome, alice (ops)", WAIT_MS)
        .await
        .unwrap();
    assert!(browser.text().await.unwrap().url.ends_with("/login"));

    // Timings for the report (printed, never asserted): a warm navigation and its text.
    let started = Instant::now();
    browser.navigate(&site.url("/a")).await.unwrap();
    let navigated = started.elapsed();
    browser.text().await.unwrap();
    let read = started.elapsed();
    let shot = Instant::now();
    browser.screenshot().await.unwrap();
    let shot = shot.elapsed();
    let snap = Instant::now();
    browser.snapshot().await.unwrap();
    eprintln!(
        "timing (warm): navigate {navigated:?}, navigate+text {read:?}, screenshot {shot:?}, snapshot {:?}",
        snap.elapsed()
    );

    let served = site.served();
    for expected in ["GET /", "GET /style.css", "POST /login"] {
        assert!(
            served.iter().any(|s| s == expected),
            "{expected} not in {served:?}"
        );
    }
    let proxied = proxy.seen();
    for request in &served {
        let (method, path) = request.split_once(' ').unwrap();
        let through = format!("{method} http://{}{path}", site.addr);
        assert!(
            proxied.contains(&through),
            "{through} bypassed the proxy: {proxied:?}"
        );
    }
}

/// The accessibility snapshot names the form's fields with references that stay the same
/// between snapshots; typing and keys drive the focused field and submit the form.
#[tokio::test]
async fn snapshot_names_fields_and_keys_submit() {
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    browser.navigate(&site.url("/")).await.unwrap();
    let first = browser.snapshot().await.unwrap();
    assert_eq!(first.title, "Login");
    for (role, name) in [
        ("textbox", "User name"),
        ("textbox", "Password"),
        ("combobox", "Role"),
        ("button", "Sign in"),
        ("link", "Page A"),
        ("heading", "Sign in"),
    ] {
        reference(&first, role, name);
    }
    let second = browser.snapshot().await.unwrap();
    assert_eq!(
        reference(&first, "textbox", "User name"),
        reference(&second, "textbox", "User name")
    );

    browser
        .click(&reference(&first, "textbox", "User name"))
        .await
        .unwrap();
    assert_eq!(browser.type_text("bob").await.unwrap(), 3);
    browser.press("Tab").await.unwrap();
    browser.type_text("pw").await.unwrap();
    let focused = browser.snapshot().await.unwrap();
    let user = focused
        .nodes
        .iter()
        .find(|n| n.name == "User name" && n.role == "textbox")
        .unwrap();
    assert_eq!(user.value.as_deref(), Some("bob"));
    browser.press("Enter").await.unwrap();
    browser
        .wait_for_text("Welcome, bob", WAIT_MS)
        .await
        .unwrap();
    let refused = browser.press("Hyper").await.unwrap_err();
    assert_eq!(refused.code(), "browser_key_unknown");
    let login = browser.snapshot().await.unwrap();
    assert_eq!(login.title, "Welcome");
    let not_a_field = browser
        .fill(&reference(&login, "paragraph", ""), "x")
        .await
        .unwrap_err();
    assert_eq!(not_a_field.code(), "browser_not_a_field");
    let gone = browser.click("e999999").await.unwrap_err();
    assert_eq!(gone.code(), "browser_ref_unknown");
}

/// navigate, back and forward move through the tab's history and say where they are.
#[tokio::test]
async fn navigate_back_forward() {
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    let a = browser.navigate(&site.url("/a")).await.unwrap();
    assert_eq!((a.title.as_str(), a.moved), ("Page A", true));
    let b = browser.navigate(&site.url("/b")).await.unwrap();
    assert_eq!(b.title, "Page B");
    let back = browser.back().await.unwrap();
    assert_eq!(
        (back.url, back.title),
        (site.url("/a"), "Page A".to_owned())
    );
    browser
        .wait_for_text("This is page A", WAIT_MS)
        .await
        .unwrap();
    let forward = browser.forward().await.unwrap();
    assert_eq!(forward.url, site.url("/b"));
    let nowhere = browser.forward().await.unwrap();
    assert!(!nowhere.moved);
    // Only web pages: a file would be read around the proxy, a javascript: URL is script.
    for url in [
        "file:///etc/passwd",
        "javascript:document.title='x'",
        "chrome://version",
    ] {
        let refused = browser.navigate(url).await.unwrap_err();
        assert_eq!(refused.code(), "browser_url_refused", "{url}");
    }
    assert_eq!(browser.tabs().await.unwrap()[0].url, site.url("/b"));
    browser
        .wait_for(&Locator::Css("p#b".into()), WAIT_MS)
        .await
        .unwrap();
    let missing = browser
        .wait_for(&Locator::Css("p#nothing".into()), 200)
        .await
        .unwrap_err();
    assert_eq!(missing.code(), "browser_timeout");
}

/// Two tabs are listed, switched between and closed.
#[tokio::test]
async fn tabs_listed_switched_closed() {
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    let a = browser.navigate(&site.url("/a")).await.unwrap();
    let b = browser.open(&site.url("/b")).await.unwrap();
    assert_ne!(a.tab, b.tab);
    let tabs = browser.tabs().await.unwrap();
    assert_eq!(tabs.len(), 2, "{tabs:?}");
    let current: Vec<_> = tabs.iter().filter(|t| t.current).collect();
    assert_eq!((current.len(), current[0].id.as_str()), (1, b.tab.as_str()));
    assert!(tabs.iter().any(|t| t.id == a.tab && t.title == "Page A"));

    let switched = browser.switch(&a.tab).await.unwrap();
    assert_eq!(switched.url, site.url("/a"));
    assert!(
        browser
            .text()
            .await
            .unwrap()
            .text
            .contains("This is page A")
    );
    browser.close(&b.tab).await.unwrap();
    let tabs = browser.tabs().await.unwrap();
    assert_eq!(tabs.len(), 1);
    assert!(tabs[0].current);
    let missing = browser.close(&b.tab).await.unwrap_err();
    assert_eq!(missing.code(), "browser_tab_missing");
    assert!(
        browser.product().starts_with("Chrome/"),
        "{}",
        browser.product()
    );
    browser.shutdown().await;
}

/// A screenshot is a PNG of exactly the viewport's size.
#[tokio::test]
async fn screenshot_is_a_viewport_png() {
    let options = |proxy, profile: std::path::PathBuf| Options {
        viewport_width: 800,
        viewport_height: 600,
        ..Options::new(proxy, profile)
    };
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(options).await
    else {
        return;
    };
    browser.navigate(&site.url("/a")).await.unwrap();
    let shot = browser.screenshot().await.unwrap();
    assert_eq!((shot.width, shot.height), (800, 600));
    let decoder = png::Decoder::new(std::io::Cursor::new(&shot.png));
    let reader = decoder.read_info().unwrap();
    assert_eq!((reader.info().width, reader.info().height), (800, 600));
}

/// A click at coordinates lands on what is drawn there; the wheel scrolls the page.
#[tokio::test]
async fn coordinates_click_and_scroll() {
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    browser.navigate(&site.url("/tall")).await.unwrap();
    browser.click_at(50.0, 30.0).await.unwrap();
    browser.wait_for_text("clicked!", WAIT_MS).await.unwrap();
    let scrolled = browser.scroll(0.0, 600.0).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut y = scrolled.y;
    while y <= 0.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        y = browser.scroll(0.0, 0.0).await.unwrap().y;
    }
    assert!(y > 0.0, "the page did not scroll");
}

/// `evaluate` is refused unless the options allow scripts; allowed, it returns JSON.
#[tokio::test]
async fn evaluate_refused_by_default() {
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    browser.navigate(&site.url("/a")).await.unwrap();
    let refused = browser.evaluate("document.title").await.unwrap_err();
    assert!(matches!(refused, BrowserError::ScriptRefused));
    assert_eq!(refused.code(), "browser_script_refused");

    let allowed = |proxy, profile: std::path::PathBuf| Options {
        allow_script: true,
        ..Options::new(proxy, profile)
    };
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(allowed).await
    else {
        return;
    };
    browser.navigate(&site.url("/a")).await.unwrap();
    let value = browser
        .evaluate("Promise.resolve({ title: document.title, sum: 1 + 2 })")
        .await
        .unwrap();
    assert_eq!(
        value.value,
        serde_json::json!({ "title": "Page A", "sum": 3 })
    );
    let thrown = browser.evaluate("null.x").await.unwrap_err();
    assert_eq!(thrown.code(), "browser_script_failed");
}

/// A download lands in the caller's directory, under Chromium's id, whole.
#[tokio::test]
async fn download_lands_in_the_dir() {
    let downloads = tempfile::tempdir().unwrap();
    let dir = downloads.path().join("downloads");
    let options = |proxy, profile: std::path::PathBuf| Options {
        download_dir: Some(dir.clone()),
        ..Options::new(proxy, profile)
    };
    let Some(Fixture {
        mut browser,
        site,
        proxy,
        ..
    }) = fixture(options).await
    else {
        return;
    };
    browser.navigate(&site.url("/download")).await.unwrap();
    let snapshot = browser.snapshot().await.unwrap();
    browser
        .click(&reference(&snapshot, "link", "Get the report"))
        .await
        .unwrap();
    let download = browser.wait_for_download(WAIT_MS).await.unwrap();
    assert_eq!(download.suggested_filename, "report.txt");
    assert_eq!(download.url, site.url("/file.txt"));
    assert!(download.path.starts_with(&dir), "{download:?}");
    assert_eq!(std::fs::read(&download.path).unwrap(), support::REPORT);
    assert_eq!(download.bytes, support::REPORT.len() as u64);
    let through = format!("GET http://{}/file.txt", site.addr);
    assert!(proxy.seen().contains(&through));
}

/// Without a proxy nothing starts: the browser is never run unproxied. A missing or failing
/// executable is a coded error too.
#[tokio::test]
async fn launch_without_a_proxy_is_refused() {
    let profile = tempfile::tempdir().unwrap();
    let options = Options {
        proxy: None,
        ..Options::new("127.0.0.1:9".parse().unwrap(), profile.path())
    };
    let refused = Browser::launch(options).await.err().unwrap();
    assert!(matches!(refused, BrowserError::ProxyMissing));
    assert_eq!(refused.code(), "browser_proxy_missing");
    assert_eq!(std::fs::read_dir(profile.path()).unwrap().count(), 0);

    let options = Options {
        executable: "/nonexistent/chromium".into(),
        ..Options::new("127.0.0.1:9".parse().unwrap(), profile.path())
    };
    let missing = Browser::launch(options).await.err().unwrap();
    assert_eq!(missing.code(), "browser_unavailable");

    // A program that exits at once instead of speaking DevTools failed to start.
    let options = Options {
        executable: "/bin/false".into(),
        ..Options::new("127.0.0.1:9".parse().unwrap(), profile.path())
    };
    let exited = Browser::launch(options).await.err().unwrap();
    assert_eq!(exited.code(), "browser_launch_failed", "{exited}");
}

/// A proxy that is not there means no traffic at all: Chromium never falls back to going
/// direct, and the page is not reached.
#[tokio::test]
async fn a_dead_proxy_means_no_traffic() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let options = |_proxy, profile: std::path::PathBuf| Options::new(dead_addr, profile);
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(options).await
    else {
        return;
    };
    let failed = browser.navigate(&site.url("/")).await.unwrap_err();
    assert_eq!(failed.code(), "browser_navigation_failed", "{failed}");
    assert!(failed.to_string().contains("PROXY"), "{failed}");
    assert!(site.served().is_empty(), "{:?}", site.served());
}

/// Dropping the browser kills Chromium and every process it forked.
#[tokio::test]
async fn drop_leaves_no_chromium_behind() {
    let Some(Fixture {
        mut browser,
        site,
        profile,
        ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    browser.navigate(&site.url("/a")).await.unwrap();
    let marker = profile.path().to_string_lossy().into_owned();
    let running = support::processes_with(&marker);
    assert!(
        running.len() >= 2,
        "expected Chromium and its children: {running:?}"
    );
    drop(browser);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = support::processes_with(&marker);
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Chromium and every process it forks run confined: no new privileges (so the Landlock domain
/// entered before exec holds) and no capabilities; Chromium's environment is its profile's.
#[tokio::test]
async fn chromium_runs_confined() {
    let Some(Fixture {
        mut browser,
        site,
        profile,
        ..
    }) = fixture(Options::new).await
    else {
        return;
    };
    browser.navigate(&site.url("/a")).await.unwrap();
    let marker = profile.path().to_string_lossy().into_owned();
    let running = support::processes_with(&marker);
    assert!(running.len() >= 2, "Chromium and its children: {running:?}");
    for pid in &running {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue; // gone meanwhile
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(field("NoNewPrivs:"), "1", "process {pid}");
        assert_eq!(field("CapEff:"), "0000000000000000", "process {pid}");
    }
    let environ = std::fs::read(format!("/proc/{}/environ", browser.pid())).unwrap();
    let home = format!("HOME={marker}");
    assert!(
        environ.split(|b| *b == 0).any(|v| v == home.as_bytes()),
        "Chromium's HOME is its profile"
    );
}

/// Chromium reads only the system's files, its own and the directories it is given: a file
/// handed to an upload from there is read by the page; one from anywhere else (a home
/// directory, aido's own) is not, whoever names it.
#[tokio::test]
async fn chromium_reads_only_what_it_is_given() {
    let given = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let allowed = given.path().join("allowed.txt");
    let secret = elsewhere.path().join("secret.txt");
    std::fs::write(&allowed, "given").unwrap();
    std::fs::write(&secret, "aido-test-secret").unwrap();
    let readable = vec![given.path().to_path_buf()];
    let options = |proxy, profile: std::path::PathBuf| Options {
        allow_script: true,
        readable: readable.clone(),
        ..Options::new(proxy, profile)
    };
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(options).await
    else {
        return;
    };
    browser.navigate(&site.url("/upload")).await.unwrap();
    let found = browser.find("Attachment", 20).await.unwrap();
    let input = found.nodes[0].reference.clone().unwrap();
    let read = "document.getElementById('f').files[0].text()";
    browser
        .set_files(&input, &[allowed.display().to_string()])
        .await
        .unwrap();
    assert_eq!(browser.evaluate(read).await.unwrap().value, "given");
    let handed = browser
        .set_files(&input, &[secret.display().to_string()])
        .await;
    let read_back = browser.evaluate(read).await;
    assert!(
        handed.is_err() || read_back.as_ref().is_err(),
        "the page read a file outside what Chromium is given: {read_back:?}"
    );
}

/// What the browser toolset asks beyond the primitives: a wheel at a point that the page's
/// position shows at once, a zoom enlarged to the viewport, a chord, the tab's requests read
/// once, a tab acted on without becoming the active one, and a download settled without a wait.
#[tokio::test]
async fn toolset_input_logs_tabs_and_downloads() {
    let downloads = tempfile::tempdir().unwrap();
    let dir = downloads.path().join("downloads");
    let options = |proxy, profile: std::path::PathBuf| Options {
        download_dir: Some(dir.clone()),
        ..Options::new(proxy, profile)
    };
    let Some(Fixture {
        mut browser, site, ..
    }) = fixture(options).await
    else {
        return;
    };
    let tall = browser.navigate(&site.url("/tall")).await.unwrap();
    browser
        .pointer(
            100.0,
            100.0,
            aido_browser::Gesture::Wheel { dx: 0.0, dy: 300.0 },
            None,
        )
        .await
        .unwrap();
    assert!(
        browser.scroll(0.0, 0.0).await.unwrap().y > 0.0,
        "the wheel scrolled by now"
    );
    let zoomed = browser.zoom([0.0, 0.0, 320.0, 200.0]).await.unwrap();
    let (width, height) = browser.viewport();
    assert_eq!(
        (zoomed.width, zoomed.height),
        (width, height.min(800)),
        "4x of 320x200"
    );
    assert_eq!(browser.keys("ctrl+a Tab", 2).await.unwrap(), 4);
    assert_eq!(
        browser.keys("hyper+x", 1).await.unwrap_err().code(),
        "browser_key_unknown"
    );
    let network = browser.read_network().unwrap();
    assert!(
        network
            .entries
            .iter()
            .any(|e| e.url == site.url("/tall") && e.status == Some(200)),
        "{network:?}"
    );
    assert!(
        browser.read_network().unwrap().entries.is_empty(),
        "read once"
    );

    let blank = browser.new_tab().await.unwrap();
    assert_eq!((blank.url.as_str(), blank.current), ("about:blank", true));
    let previous = browser.act_on(&tall.tab).await.unwrap();
    assert!(browser.text().await.unwrap().url.ends_with("/tall"));
    browser.act_on_again(previous);
    assert_eq!(browser.current_tab().as_deref(), Some(blank.id.as_str()));

    browser.navigate(&site.url("/download")).await.unwrap();
    assert!(
        browser.settle_downloads(WAIT_MS).await.is_empty(),
        "none begun"
    );
    let snapshot = browser.snapshot().await.unwrap();
    let link = reference(&snapshot, "link", "Get the report");
    let found = browser.find("report link", 20).await.unwrap();
    assert_eq!(found.nodes[0].reference.as_deref(), Some(link.as_str()));
    browser.click(&link.replace('e', "ref_")).await.unwrap();
    let mut settled = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while settled.is_empty() && Instant::now() < deadline {
        settled = browser.settle_downloads(WAIT_MS).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let download = settled.pop().unwrap().unwrap();
    assert_eq!(std::fs::read(&download.path).unwrap(), support::REPORT);
    browser.shutdown().await;
}
