//! A whole machine for the agent, through the real binary: `aido vm image build`, then over MCP
//! vm_start, type a command and read its output back from the screen, find text with its box,
//! a screenshot as an MCP image, a machine snapshot taken and restored, shutdown; and the
//! policy switch that turns machines off. The guest boots on TCG here (KVM where it is real).

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers of tests may fail loudly

use crate::common;

use common::{Mcp, home, session_of, stdout};
use serde_json::json;

#[test]
#[allow(clippy::too_many_lines)]
fn an_agent_drives_a_machine_over_mcp() {
    let h = home();
    let built = h.cmd(&["vm", "image", "build"]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    assert!(stdout(&built).contains("guest image ready"));

    let mut mcp = Mcp::start(&h, "vm-agent");
    let missing = mcp.call("vm_info", json!({}));
    assert_eq!(
        missing["result"]["structuredContent"]["code"],
        "vm_not_found"
    );

    let started = mcp.call("vm_start", json!({"vm": "box"}));
    assert_eq!(started["result"]["isError"], false, "{started}");
    let first = &started["result"]["structuredContent"];
    eprintln!(
        "machine started on {} in {} ms (the image's template made by this start: {})",
        first["accel"], first["started_in_ms"], first["from"]["template_made"]
    );
    assert_eq!(first["from"]["template_made"], true, "{first}");
    assert_eq!(first["hostname"], "box");
    let prompt = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "box", "text": "# ", "timeout_ms": 30000}),
    );
    assert_eq!(prompt["result"]["isError"], false, "{prompt}");
    let typed = mcp.call(
        "vm_type",
        json!({"vm": "box", "text": "echo answer-$((6*7))\n"}),
    );
    assert_eq!(typed["result"]["isError"], false, "{typed}");
    let answer = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "box", "text": "answer-42", "timeout_ms": 30000}),
    );
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let found = mcp.call("vm_find_text", json!({"vm": "box", "text": "answer-42"}));
    let matches = found["result"]["structuredContent"]["matches"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!matches.is_empty());
    assert_eq!(
        matches[0]["bbox"][2],
        9 * 9,
        "nine cells of nine pixels: {matches:?}"
    );

    let shot = mcp.call("vm_screenshot", json!({"vm": "box"}));
    let content = shot["result"]["content"].as_array().unwrap();
    let image = content
        .iter()
        .find(|c| c["type"] == "image")
        .expect("an MCP image");
    assert_eq!(image["mimeType"], "image/png");
    assert!(image["data"].as_str().unwrap().len() > 1000);
    assert!(
        shot["result"]["structuredContent"]["text"]
            .as_str()
            .unwrap()
            .contains("answer-42")
    );
    assert_eq!(shot["result"]["structuredContent"]["width"], 720);

    assert_eq!(
        mcp.call("vm_snapshot_create", json!({"vm": "box", "name": "s1"}))["result"]["isError"],
        false
    );
    mcp.call("vm_type", json!({"vm": "box", "text": "clear\n"}));
    let cleared = mcp.call("vm_find_text", json!({"vm": "box", "text": "answer-42"}));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut gone = cleared["result"]["structuredContent"]["found"] == false;
    while !gone && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
        gone = mcp.call("vm_find_text", json!({"vm": "box", "text": "answer-42"}))["result"]["structuredContent"]
            ["found"]
            == false;
    }
    assert!(gone, "clear wiped the screen");
    let restored = mcp.call("vm_snapshot_restore", json!({"vm": "box", "name": "s1"}));
    assert_eq!(restored["result"]["isError"], false, "{restored}");
    let back = mcp.call("vm_find_text", json!({"vm": "box", "text": "answer-42"}));
    assert_eq!(
        back["result"]["structuredContent"]["found"], true,
        "the old screen is back"
    );

    assert_eq!(
        mcp.call("vm_type", json!({"vm": "box", "text": "ünïcode"}))["result"]["structuredContent"]
            ["code"],
        "vm_unknown_key"
    );
    let listed = mcp.call("vm_snapshot_list", json!({"vm": "box"}));
    assert_eq!(
        listed["result"]["structuredContent"]["snapshots"],
        json!(["s1"]),
        "{listed}"
    );
    let deleted = mcp.call("vm_snapshot_delete", json!({"vm": "box", "name": "s1"}));
    assert_eq!(deleted["result"]["isError"], false, "{deleted}");
    let listed = mcp.call("vm_snapshot_list", json!({"vm": "box"}));
    assert_eq!(
        listed["result"]["structuredContent"]["snapshots"],
        json!([])
    );
    mcp.call("vm_move", json!({"vm": "box", "x": 100, "y": 50}));
    let cursor = mcp.call("vm_cursor_position", json!({"vm": "box"}));
    let at = &cursor["result"]["structuredContent"];
    assert_eq!((at["x"].clone(), at["y"].clone()), (json!(100), json!(50)));
    let scroll = mcp.call(
        "vm_scroll",
        json!({"vm": "box", "x": 1, "y": 1, "amount": 1000}),
    );
    assert_eq!(
        scroll["result"]["structuredContent"]["code"],
        "invalid_arguments"
    );
    let rebooted = mcp.call("vm_reboot", json!({"vm": "box"}));
    assert_eq!(rebooted["result"]["isError"], false, "{rebooted}");
    let up = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "box", "text": "BusyBox", "timeout_ms": 30000}),
    );
    assert_eq!(
        up["result"]["isError"], false,
        "the machine came back up: {up}"
    );
    let list = mcp.call("vm_list", json!({}));
    assert_eq!(
        list["result"]["structuredContent"]["machines"][0]["vm"],
        "box"
    );
    let pid = list["result"]["structuredContent"]["machines"][0]["pid"]
        .as_u64()
        .unwrap();
    assert_eq!(
        mcp.call("vm_force_off", json!({"vm": "box"}))["result"]["isError"],
        false
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "QEMU is gone"
    );

    // The next start finds the template: restored at its prompt, with its own hostname.
    let again = mcp.call("vm_start", json!({"vm": "box-2"}));
    let again = &again["result"]["structuredContent"];
    assert_eq!(again["from"]["template_made"], false, "{again}");
    assert_eq!(again["from"]["template"], first["from"]["template"]);
    eprintln!("started from the template in {} ms", again["started_in_ms"]);
    mcp.call(
        "vm_type",
        json!({"vm": "box-2", "text": "echo I-am-$(hostname)\n"}),
    );
    let named = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "box-2", "text": "I-am-box-2", "timeout_ms": 30000}),
    );
    assert_eq!(named["result"]["isError"], false, "{named}");
    // A cold boot on request: the kernel boots, no template involved.
    let cold = mcp.call("vm_start", json!({"vm": "cold", "cold_boot": true}));
    assert_eq!(
        cold["result"]["structuredContent"]["from"], "boot",
        "{cold}"
    );
    let up = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "cold", "text": "# ", "timeout_ms": 60000}),
    );
    assert_eq!(up["result"]["isError"], false, "{up}");
    for vm in ["box-2", "cold"] {
        assert_eq!(
            mcp.call("vm_force_off", json!({ "vm": vm }))["result"]["isError"],
            false
        );
    }
    let id = session_of(&h, "vm-agent");
    mcp.close();

    // Every machine action is in the journal like any other.
    let show = stdout(&h.cmd(&["replay", "show", &id]));
    for primitive in [
        "vm_start",
        "vm_type",
        "vm_screenshot",
        "vm_snapshot_restore",
        "vm_force_off",
    ] {
        assert!(show.contains(primitive), "{primitive} in {show}");
    }
    assert!(h.cmd(&["replay", "verify", &id]).status.success());
}

#[test]
fn machines_can_be_switched_off_by_policy() {
    let h = home();
    std::fs::create_dir_all(&h.aido_home).unwrap();
    std::fs::write(h.aido_home.join("config.toml"), "[vm]\nenabled = false\n").unwrap();
    let mut mcp = Mcp::start(&h, "no-vm");
    let refused = mcp.call("vm_start", json!({}));
    assert_eq!(
        refused["result"]["structuredContent"]["code"],
        "vm_disabled"
    );
    assert_eq!(refused["result"]["structuredContent"]["gate"], "bodies");
    let missing_image = {
        std::fs::write(h.aido_home.join("config.toml"), "").unwrap();
        let mut again = Mcp::start(&h, "no-image");
        let r = again.call("vm_start", json!({}));
        again.close();
        r
    };
    assert_eq!(
        missing_image["result"]["structuredContent"]["code"],
        "vm_image_missing"
    );
    mcp.close();
}

fn png_size_of(image: &serde_json::Value) -> (u32, u32) {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(image["data"].as_str().unwrap())
        .unwrap();
    (
        u32::from_be_bytes(bytes[16..20].try_into().unwrap()),
        u32::from_be_bytes(bytes[20..24].try_into().unwrap()),
    )
}

#[test]
#[allow(clippy::too_many_lines)]
fn a_computer_use_agent_works_unchanged() {
    let h = home();
    assert!(h.cmd(&["vm", "image", "build"]).status.success());
    let mut mcp = Mcp::start(&h, "computer-use");
    // No vm_start: the default machine boots on the first computer call.
    let shot = mcp.call("computer", json!({"action": "screenshot"}));
    assert_eq!(shot["result"]["isError"], false, "{shot}");
    let image = shot["result"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap()
        .clone();
    assert_eq!(png_size_of(&image), (720, 400));
    let ready = mcp.call(
        "vm_wait_for_text",
        json!({"text": "# ", "timeout_ms": 30000}),
    );
    assert_eq!(ready["result"]["isError"], false, "{ready}");

    let typed = mcp.call(
        "computer",
        json!({"action": "type", "text": "echo cu-$((2+3))"}),
    );
    assert!(
        typed["result"]["content"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "image"),
        "a screenshot follows"
    );
    assert_eq!(
        mcp.call("computer", json!({"action": "key", "text": "Return"}))["result"]["isError"],
        false
    );
    let seen = mcp.call(
        "vm_wait_for_text",
        json!({"text": "cu-5", "timeout_ms": 30000}),
    );
    assert_eq!(seen["result"]["isError"], false, "{seen}");

    let zoom = mcp.call(
        "computer",
        json!({"action": "zoom", "region": [0, 0, 360, 200]}),
    );
    let part = zoom["result"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "image")
        .unwrap()
        .clone();
    assert_eq!(png_size_of(&part), (360, 200));
    mcp.call(
        "computer",
        json!({"action": "mouse_move", "coordinate": [200, 100]}),
    );
    let at = mcp.call("computer", json!({"action": "cursor_position"}));
    assert_eq!(at["result"]["content"][0]["text"], "X=200,Y=100");
    for action in [
        json!({"action": "left_click", "coordinate": [10, 10], "text": "shift"}),
        json!({"action": "double_click", "coordinate": [10, 10]}),
        json!({"action": "triple_click", "coordinate": [10, 10]}),
        json!({"action": "right_click"}),
        json!({"action": "middle_click"}),
        json!({"action": "left_click_drag", "start_coordinate": [1, 1], "coordinate": [50, 50]}),
        json!({"action": "left_mouse_down"}),
        json!({"action": "left_mouse_up"}),
        json!({"action": "scroll", "coordinate": [100, 100], "scroll_direction": "down", "scroll_amount": 3, "text": "ctrl"}),
        json!({"action": "hold_key", "text": "shift", "duration": 0.1}),
        json!({"action": "wait", "duration": 0.1}),
    ] {
        let r = mcp.call("computer", action.clone());
        assert_eq!(r["result"]["isError"], false, "{action}: {r}");
    }
    // computer_toolset_20260801: one turn's members in order, stopping at the first failure.
    let batch = mcp.call(
        "computer_toolset",
        json!({"version": "computer_toolset_20260801", "actions": [
            {"id": "t1", "name": "mouse_move", "input": {"coordinate": [100, 50]}},
            {"id": "t2", "name": "cursor_position", "input": {}},
            {"id": "t3", "name": "key", "input": {"text": "Return", "repeat": 2}},
            {"id": "t4", "name": "screenshot", "input": {}},
            {"id": "t5", "name": "zoom", "input": {"region": [0, 0, 72, 40]}},
            {"id": "t6", "name": "left_click", "input": {"coordinate": [9999, 0]}},
            {"id": "t7", "name": "wait", "input": {"duration": 0.1}},
        ]}),
    );
    assert_eq!(batch["result"]["isError"], false, "{batch}");
    let results = &batch["result"]["structuredContent"]["results"];
    assert_eq!(results[1]["text"], "X=100,Y=50");
    assert_eq!(results[2]["text"], "Pressed Return.");
    assert_eq!(results[5]["code"], "computer_point_outside");
    assert_eq!(results[6]["code"], "computer_not_executed");
    let images: Vec<(u32, u32)> = batch["result"]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "image")
        .map(png_size_of)
        .collect();
    // The screenshot as it is (720x400 fits the budget); the zoom scaled up to fill it.
    assert_eq!(images, [(720, 400), (1438, 799)]);
    let bad = mcp.call(
        "computer",
        json!({"action": "left_click_drag", "coordinate": [5, 5]}),
    );
    assert_eq!(
        bad["result"]["structuredContent"]["code"],
        "computer_input_missing"
    );
    let tools = mcp.request("tools/list", json!({}));
    let computer = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "computer")
        .unwrap()
        .clone();
    let actions = computer["inputSchema"].to_string();
    for name in [
        "left_mouse_down",
        "hold_key",
        "zoom",
        "triple_click",
        "scroll",
    ] {
        assert!(actions.contains(name), "{name} in the computer schema");
    }
    mcp.call("vm_force_off", json!({}));
    mcp.close();
}

fn identity(mcp: &mut Mcp, vm: &str) -> String {
    mcp.call(
        "vm_type",
        json!({"vm": vm, "text": "cat /etc/aido-identity\n"}),
    );
    let found = mcp.call(
        "vm_wait_for_text",
        json!({"vm": vm, "text": "aido-clone-", "timeout_ms": 30000}),
    );
    assert_eq!(found["result"]["isError"], false, "{found}");
    let shot = mcp.call("vm_screenshot", json!({"vm": vm}));
    let text = shot["result"]["structuredContent"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    text.lines()
        .find(|l| l.starts_with("aido-clone-"))
        .map(|l| l.trim().to_owned())
        .unwrap_or_else(|| panic!("no identity line in {text}"))
}

#[test]
fn warm_clones_come_from_the_pool_each_with_its_own_identity() {
    let h = home();
    assert!(h.cmd(&["vm", "image", "build"]).status.success());
    let mut mcp = Mcp::start(&h, "pool-agent");
    let first = mcp.call("vm_pool_acquire", json!({"vm": "one"}));
    assert_eq!(first["result"]["isError"], false, "{first}");
    let second = mcp.call("vm_pool_acquire", json!({"vm": "two"}));
    let ms = second["result"]["structuredContent"]["acquire_ms"]
        .as_f64()
        .unwrap();
    eprintln!("acquired a warm clone in {ms:.1} ms");
    let status = mcp.call("vm_pool_status", json!({}));
    assert_eq!(status["result"]["structuredContent"]["pool"]["acquired"], 2);
    let (a, b) = (identity(&mut mcp, "one"), identity(&mut mcp, "two"));
    assert_ne!(a, b, "two clones, two identities");
    // Releasing the wrong kind of machine is refused; the right kind is destroyed.
    assert_eq!(
        mcp.call("vm_destroy_clone", json!({"vm": "one"}))["result"]["structuredContent"]["code"],
        "vm_wrong_kind"
    );
    assert_eq!(
        mcp.call("vm_pool_release", json!({"vm": "one"}))["result"]["isError"],
        false
    );
    // A running machine can be cloned.
    let cloned = mcp.call("vm_clone", json!({"source": "two", "vm": "three"}));
    assert_eq!(cloned["result"]["isError"], false, "{cloned}");
    let copy = mcp.call("vm_find_text", json!({"vm": "three", "text": &b}));
    assert_eq!(
        copy["result"]["structuredContent"]["found"], true,
        "the clone shows the source's screen"
    );
    assert_eq!(
        mcp.call("vm_destroy_clone", json!({"vm": "three"}))["result"]["isError"],
        false
    );
    assert_eq!(
        mcp.call("vm_pool_release", json!({"vm": "two"}))["result"]["isError"],
        false
    );
    assert_eq!(
        mcp.call("vm_pool_shutdown", json!({}))["result"]["isError"],
        false
    );
    assert_eq!(
        mcp.call("vm_list", json!({}))["result"]["structuredContent"]["machines"],
        json!([])
    );
    mcp.close();
}

/// The default machine's screen text.
fn screen_text(mcp: &mut Mcp) -> String {
    let screen = mcp.call("vm_screenshot", json!({}));
    screen["result"]["structuredContent"]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// With the default machine running: a screen and a file, a workspace snapshot that takes the
/// machine along, both changed, then a session rewind to the snapshot brings both back; both
/// changed again, and a restore_snapshot brings both back too.
fn snapshot_change_and_rewind(mcp: &mut Mcp, ws: &std::path::Path) {
    mcp.call(
        "vm_wait_for_text",
        json!({"text": "# ", "timeout_ms": 30000}),
    );
    mcp.call("vm_type", json!({"text": "echo one-$((0+1))\n"}));
    let one = mcp.call(
        "vm_wait_for_text",
        json!({"text": "one-1", "timeout_ms": 30000}),
    );
    assert_eq!(one["result"]["isError"], false, "{one}");
    mcp.call("write_file", json!({"path": "f.txt", "content": "one"}));
    let snap = mcp.call("create_snapshot", json!({}));
    assert_eq!(
        snap["result"]["structuredContent"]["machines"],
        json!(["default"]),
        "{snap}"
    );
    // The seq the result carries: rewinding to it keeps the snapshot action.
    let at = snap["result"]["_meta"]["aido/seq"].as_u64().unwrap();
    let id = snap["result"]["structuredContent"]["snapshot"]
        .as_str()
        .unwrap()
        .to_owned();
    mcp.call("vm_type", json!({"text": "clear; echo two-$((1+1))\n"}));
    mcp.call(
        "vm_wait_for_text",
        json!({"text": "two-2", "timeout_ms": 30000}),
    );
    mcp.call("write_file", json!({"path": "f.txt", "content": "two"}));
    let rewound = mcp.call("rewind", json!({"to_seq": at}));
    assert_eq!(rewound["result"]["isError"], false, "{rewound}");
    assert_eq!(
        rewound["result"]["structuredContent"]["machines"],
        json!(["default"])
    );
    assert_eq!(std::fs::read_to_string(ws.join("f.txt")).unwrap(), "one");
    let text = screen_text(mcp);
    assert!(
        text.contains("one-1") && !text.contains("two-2"),
        "the machine's screen went back too: {text}"
    );

    // restore_snapshot covers the machines as the rewind does (issue 8, point 7).
    mcp.call("vm_type", json!({"text": "clear; echo three-$((1+2))\n"}));
    mcp.call(
        "vm_wait_for_text",
        json!({"text": "three-3", "timeout_ms": 30000}),
    );
    mcp.call("write_file", json!({"path": "f.txt", "content": "three"}));
    let restored = mcp.call("restore_snapshot", json!({"snapshot": id}));
    assert_eq!(restored["result"]["isError"], false, "{restored}");
    assert_eq!(
        restored["result"]["structuredContent"]["machines"],
        json!(["default"]),
        "{restored}"
    );
    assert_eq!(std::fs::read_to_string(ws.join("f.txt")).unwrap(), "one");
    let text = screen_text(mcp);
    assert!(
        text.contains("one-1") && !text.contains("three-3"),
        "restore_snapshot put the machine's screen back too: {text}"
    );
}

#[test]
fn a_session_rewind_also_rewinds_the_machines() {
    let h = home();
    assert!(h.cmd(&["vm", "image", "build"]).status.success());
    let ws = h.workspace("project", "");
    let mut mcp = Mcp::start(&h, "rewind-vm");
    assert_eq!(mcp.call("vm_start", json!({}))["result"]["isError"], false);
    snapshot_change_and_rewind(&mut mcp, &ws);
    mcp.call("vm_force_off", json!({}));
    mcp.close();
}

#[test]
fn a_graphical_screen_is_read_by_ocr() {
    let h = home();
    let built = h.cmd(&["vm", "image", "build", "--framebuffer"]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut mcp = Mcp::start(&h, "ocr-agent");
    let started = mcp.call("vm_start", json!({"vm": "fb", "display": "framebuffer"}));
    assert_eq!(started["result"]["isError"], false, "{started}");
    eprintln!("started: {}", started["result"]["structuredContent"]);
    let up = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "fb", "text": "BusyBox", "timeout_ms": 60000}),
    );
    assert_eq!(up["result"]["isError"], false, "{up}");
    mcp.call(
        "vm_type",
        json!({"vm": "fb", "text": "echo 'Graphical hello 42'\n"}),
    );
    let seen = mcp.call(
        "vm_wait_for_text",
        json!({"vm": "fb", "text": "Graphical hello 42", "timeout_ms": 60000}),
    );
    assert_eq!(seen["result"]["isError"], false, "{seen}");
    let m = &seen["result"]["structuredContent"]["match"];
    assert_eq!(m["source"], "ocr");
    assert!(
        m["similarity"].as_f64().unwrap() >= 0.8 && m["bbox"][2].as_u64().unwrap() > 50,
        "{m}"
    );
    let shot = mcp.call("vm_screenshot", json!({"vm": "fb"}));
    assert_eq!(shot["result"]["structuredContent"]["width"], 1280);
    let clicked = mcp.call(
        "vm_click_text",
        json!({"vm": "fb", "text": "Graphical hello 42"}),
    );
    assert_eq!(clicked["result"]["isError"], false, "{clicked}");
    mcp.call("vm_force_off", json!({"vm": "fb"}));
    mcp.close();
}

#[test]
fn a_person_watches_and_drives_the_agents_machine() {
    let h = home();
    assert!(h.cmd(&["vm", "image", "build"]).status.success());
    let mut mcp = Mcp::start(&h, "watched-agent");
    assert_eq!(
        mcp.call("vm_start", json!({"vm": "box"}))["result"]["isError"],
        false
    );
    mcp.call(
        "vm_wait_for_text",
        json!({"vm": "box", "text": "# ", "timeout_ms": 30000}),
    );

    assert_eq!(stdout(&h.cmd(&["vm", "list"])).trim(), "box");
    let png = h.home.join("box.png");
    let shot = h.cmd(&["vm", "shot", "box", "-o", png.to_str().unwrap()]);
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    assert_eq!(&std::fs::read(&png).unwrap()[1..4], b"PNG");
    assert!(
        h.cmd(&["vm", "type", "box", "echo person-$((2*21))\n"])
            .status
            .success()
    );
    let waited = h.cmd(&[
        "vm",
        "wait-text",
        "box",
        "person-42",
        "--timeout-ms",
        "30000",
    ]);
    assert!(
        waited.status.success(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let missing = h.cmd(&["vm", "click-text", "box", "not on the screen"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("[vm_text_not_found]"));

    // The live view: a page on loopback, refused without the token.
    let live = stdout(&h.cmd(&["vm", "live"])).trim().to_owned();
    assert!(
        live.starts_with("http://127.0.0.1:") && live.contains("?token="),
        "{live}"
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let page = agent
        .get(&live)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(
        page.contains("aido live view") && page.contains("/api/vm/"),
        "{page}"
    );
    let without = live.split('?').next().unwrap().to_owned();
    assert_eq!(agent.get(&without).call().unwrap().status(), 401);
    let screen = agent
        .get(&format!(
            "{}api/vm/box/screen.png?{}",
            without,
            live.split('?').nth(1).unwrap()
        ))
        .call()
        .unwrap();
    assert_eq!(screen.status(), 200);

    mcp.call("vm_force_off", json!({"vm": "box"}));
    let person = session_of(&h, "aido vm (person)");
    mcp.close();
    let show = stdout(&h.cmd(&["replay", "show", &person]));
    assert!(
        show.contains("vm_type") && show.contains("vm_wait_for_text"),
        "a person's input is journaled: {show}"
    );
    assert!(!show.contains("vm_screenshot"), "looking is not an action");
}

#[test]
fn the_same_body_runs_on_a_libvirt_host() {
    let Some(uri) = aido_testkit::libvirt::host() else {
        return;
    };
    let h = home();
    assert!(h.cmd(&["vm", "image", "build"]).status.success());
    let ws = h.workspace("project", &format!("[vm]\nlibvirt_uri = \"{uri}\"\n"));
    let mut mcp = Mcp::start(&h, "libvirt-vm");
    let started = mcp.call("vm_start", json!({}));
    assert_eq!(started["result"]["isError"], false, "{started}");
    assert_eq!(started["result"]["structuredContent"]["host"], uri.as_str());
    let info = mcp.call("vm_info", json!({}));
    let domain = info["result"]["structuredContent"]["domain"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(domain.starts_with("aido-"), "{info}");
    let listed = std::process::Command::new("virsh")
        .args(["-c", &uri, "list", "--name"])
        .output()
        .unwrap();
    assert!(stdout(&listed).contains(&domain), "libvirt runs {domain}");

    // A workspace snapshot takes the libvirt machine along, and a rewind brings it back.
    snapshot_change_and_rewind(&mut mcp, &ws);
    let shot = mcp.call("vm_screenshot", json!({}));
    assert_eq!(shot["result"]["structuredContent"]["width"], 720, "{shot}");

    // Cloning needs a machine aido runs itself: a coded refusal, nothing lost.
    let clone = mcp.call("vm_clone", json!({"source": "default", "vm": "c"}));
    assert_eq!(
        clone["result"]["structuredContent"]["code"], "vm_unsupported_on_host",
        "{clone}"
    );
    let off = mcp.call("vm_force_off", json!({}));
    assert_eq!(off["result"]["isError"], false, "{off}");
    mcp.close();
    let listed = std::process::Command::new("virsh")
        .args(["-c", &uri, "list", "--all", "--name"])
        .output()
        .unwrap();
    assert!(!stdout(&listed).contains(&domain), "{domain} is gone");
}
