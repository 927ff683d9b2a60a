use std::collections::BTreeMap;
use std::path::PathBuf;

use aido_actions::{Failure, Image, Outcome, VmAction};
use aido_call::{Body, Calls, Reply};
use aido_vm::{Machine, MachineSpec, VmError};
use base64::Engine;
use serde_json::json;

use super::VmBodyError;
use aido_walk::Executed;

/// What it is built from.
#[derive(Clone)]
pub struct VmBodyArgs {
    /// Time and randomness (clone identities are seeded from it).
    pub clock: std::sync::Arc<dyn aido_call::clock::Clock>,
    /// Where `aido vm image build` leaves guest images (`AIDO_HOME/vm/images`).
    pub images: PathBuf,
    /// `[vm]` from the config.
    pub limits: aido_policy::config::Vm,
    /// `[computer]` from the config: the computer-use tools' screenshot size.
    pub computer: aido_policy::config::Computer,
}

/// The VM body: the running machines by name. A serial body: one call at a time, in order.
pub struct VmBody {
    args: VmBodyArgs,
    machines: BTreeMap<String, Machine>,
    /// How each machine came to be: started, cloned or pooled.
    origin: BTreeMap<String, &'static str>,
    /// The warm pool, opened on first use.
    pool: Option<aido_vm::Pool>,
    /// Templates this process has started machines from, held (and so kept from being pruned
    /// by another aido) for as long as it runs.
    templates: BTreeMap<PathBuf, aido_vm::Template>,
    /// The OCR engine (one worker for all machines), started on first use.
    ocr: Option<aido_vm::Ocr>,
}

/// A screen (PNG bytes) and the pointer position.
pub type Peeked = (Vec<u8>, (u32, u32));

/// Messages to the VM body.
pub enum VmMsg {
    /// Run one vm_* primitive.
    Run {
        /// The action.
        action: Box<VmAction>,
        /// The answer.
        reply: Reply<Executed>,
    },
    /// A look at a machine for a person (the live view): its screen and pointer. Not an
    /// action of the agent's, so not journaled; it changes nothing.
    Peek {
        /// The machine.
        vm: String,
        /// PNG bytes and the pointer position.
        reply: Reply<Peeked>,
    },
    /// The names of the running machines.
    Names {
        /// The names.
        reply: Reply<Vec<String>>,
    },
    /// What the warm pool holds (`None` before it is first used). Not journaled.
    PoolStatus {
        /// The status.
        reply: Reply<Option<aido_vm::PoolStatus>>,
    },
    /// Snapshot every running machine under `id` (for a workspace snapshot).
    SnapshotAll {
        /// The snapshot id.
        id: String,
        /// The machines snapshotted.
        reply: Reply<Vec<String>>,
    },
    /// Restore `machines` (those still running) to snapshot `id`.
    RestoreAll {
        /// The snapshot id.
        id: String,
        /// The machines it holds.
        machines: Vec<String>,
        /// The machines restored.
        reply: Reply<Vec<String>>,
    },
}

/// Longest vm_wait_for_text wait.
const WAIT_FOR_TEXT_MS_MAX: u64 = 120_000;
/// Default vm_wait_for_text wait.
const WAIT_FOR_TEXT_MS_DEFAULT: u64 = 10_000;

fn failure(e: VmError) -> Failure {
    Failure::from(e)
}

/// `qmp` for a machine aido runs itself, else the libvirt host's URI.
fn host_of(m: &Machine) -> String {
    m.host().unwrap_or_else(|| "qmp".to_owned())
}

/// A computer-use result with the answer it was rendered from, recorded as its input.
fn computed(outcome: Outcome, answer: serde_json::Value) -> Executed {
    let mut done = Executed::new(outcome);
    done.outcome.inputs.push(aido_actions::Input::Answer {
        from: aido_walk::computer::ANSWER_FROM.into(),
        value: answer,
    });
    done
}

fn out(output: serde_json::Value) -> Executed {
    Executed::new(Outcome::from_output(output))
}

impl VmBody {
    fn machine(&self, name: &str) -> Result<&Machine, Failure> {
        self.machines.get(name).ok_or_else(|| {
            Failure::from(VmBodyError::NotFound {
                why: format!("no machine named {name:?} is running (start it with vm_start)"),
            })
        })
    }

    /// Start a machine named `vm` on the `text` or `framebuffer` image: restored from the
    /// image's template (made by one boot on first use) with its own identity, or booted when
    /// `cold_boot` is set or the machine runs on a libvirt host.
    async fn start(
        &mut self,
        vm: &str,
        memory_mb: Option<u32>,
        display: Option<&str>,
        cold_boot: bool,
    ) -> Result<serde_json::Value, Failure> {
        self.check_new_name(vm)?;
        let memory = memory_mb.unwrap_or(128);
        if !(64..=self.args.limits.memory_mb_max).contains(&memory) {
            return Err(Failure::from(VmBodyError::InvalidArguments {
                why: format!(
                    "memory_mb must be 64 to {} (vm.memory_mb_max)",
                    self.args.limits.memory_mb_max
                ),
            }));
        }
        let framebuffer = match display.unwrap_or("text") {
            "text" => false,
            "framebuffer" => true,
            other => {
                return Err(Failure::from(VmBodyError::InvalidArguments {
                    why: format!("display is text or framebuffer, not {other:?}"),
                }));
            }
        };
        let image = self.image_of(framebuffer)?;
        let mut spec = if framebuffer {
            MachineSpec::framebuffer(&image)
        } else {
            MachineSpec::text_console(&image)
        };
        spec.memory_mb = memory;
        spec.boot_timeout_ms = self.args.limits.boot_timeout_ms;
        if !self.args.limits.libvirt_uri.is_empty() {
            spec.host = Some(self.args.limits.libvirt_uri.clone());
        }
        let started = std::time::Instant::now();
        let (machine, from, hostname) = if cold_boot || spec.host.is_some() {
            let machine = Machine::boot(&spec).await.map_err(failure)?;
            (machine, json!("boot"), None)
        } else {
            let template = aido_vm::Template::ensure(&spec, &self.work_dir("templates"))
                .await
                .map_err(failure)?;
            let entropy = self.args.entropy();
            let machine = template.start(vm, &entropy).await.map_err(failure)?;
            self.templates
                .entry(template.dir().to_owned())
                .or_insert_with(|| template.clone());
            (
                machine,
                json!({"template": template.dir().display().to_string(), "template_made": template.made()}),
                Some(vm),
            )
        };
        let output = json!({"vm": vm, "accel": machine.accel(), "started_in_ms": started.elapsed().as_millis() as u64,
                            "booted_in_ms": machine.booted_in().as_millis() as u64, "from": from, "hostname": hostname,
                            "pid": machine.pid(), "memory_mb": memory, "display": if framebuffer { "framebuffer" } else { "text" },
                            "host": host_of(&machine)});
        self.machines.insert(vm.to_owned(), machine);
        self.origin.insert(vm.to_owned(), "vm_start");
        Ok(output)
    }

    fn ocr(&mut self) -> Result<aido_vm::Ocr, Failure> {
        if self.ocr.is_none() {
            self.ocr = Some(aido_vm::Ocr::start().map_err(failure)?);
        }
        self.ocr.clone().ok_or_else(|| {
            Failure::from(VmBodyError::OcrFailed {
                why: "no OCR engine".into(),
            })
        })
    }

    fn check_new_name(&self, vm: &str) -> Result<(), Failure> {
        let valid = !vm.is_empty()
            && vm.len() <= 32
            && vm
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !valid {
            return Err(Failure::from(VmBodyError::InvalidArguments {
                why: "a machine name is 1 to 32 letters, digits, - or _".into(),
            }));
        }
        if self.machines.contains_key(vm) {
            return Err(Failure::from(VmBodyError::Exists {
                why: format!("{vm} is already running"),
            }));
        }
        let max = self.args.limits.machines_max as usize;
        if self.machines.len() >= max {
            return Err(Failure::from(VmBodyError::TooMany {
                why: format!("{max} machines already run (vm.machines_max)"),
            }));
        }
        Ok(())
    }

    fn image(&self) -> Result<PathBuf, Failure> {
        self.image_of(false)
    }

    /// The guest image: `text`, or `fb` for the framebuffer variant.
    fn image_of(&self, framebuffer: bool) -> Result<PathBuf, Failure> {
        let image = self
            .args
            .images
            .join(if framebuffer { "fb" } else { "text" });
        if image.join("manifest.json").exists() {
            Ok(image)
        } else {
            Err(Failure::from(VmBodyError::ImageMissing {
                why: format!(
                    "no guest image at {}; build it with `aido vm image build{}`",
                    image.display(),
                    if framebuffer { " --framebuffer" } else { "" }
                ),
            }))
        }
    }

    fn work_dir(&self, what: &str) -> PathBuf {
        self.args
            .images
            .parent()
            .unwrap_or(&self.args.images)
            .join(what)
    }

    fn remove(&mut self, vm: &str, origin: &'static str) -> Result<Machine, Failure> {
        match self.origin.get(vm) {
            None => Err(Failure::from(VmBodyError::NotFound {
                why: format!("no machine named {vm:?} is running"),
            })),
            Some(o) if *o != origin => Err(Failure::from(VmBodyError::WrongKind {
                why: format!("{vm} was not made by {origin} (it was {o})"),
            })),
            Some(_) => {
                self.origin.remove(vm);
                self.machines
                    .remove(vm)
                    .ok_or_else(|| Failure::from(VmBodyError::NotFound { why: vm.to_owned() }))
            }
        }
    }

    async fn run(&mut self, action: &VmAction) -> Result<Executed, Failure> {
        match action {
            VmAction::VmStart(a) => self
                .start(
                    &a.vm,
                    a.memory_mb,
                    a.display.as_deref(),
                    a.cold_boot.unwrap_or(false),
                )
                .await
                .map(out),
            VmAction::VmShutdown(a) => {
                let machine = self.machines.remove(&a.vm).ok_or_else(|| {
                    Failure::from(VmBodyError::NotFound {
                        why: format!("no machine named {:?} is running", a.vm),
                    })
                })?;
                machine.shutdown().await;
                Ok(out(json!({"vm": a.vm, "stopped": true})))
            }
            VmAction::VmList(_) => {
                let list: Vec<_> = self
                    .machines
                    .iter()
                    .map(|(name, m)| json!({"vm": name, "accel": m.accel(), "pid": m.pid()}))
                    .collect();
                Ok(out(json!({"machines": list})))
            }
            VmAction::VmInfo(a) => {
                let m = self.machine(&a.vm)?;
                Ok(out(
                    json!({"vm": a.vm, "accel": m.accel(), "booted_in_ms": m.booted_in().as_millis() as u64, "pid": m.pid(),
                           "host": host_of(m), "domain": m.domain()}),
                ))
            }
            VmAction::VmScreenshot(a) => {
                let m = self.machine(&a.vm)?;
                let png = m.screenshot_png().await.map_err(failure)?;
                // The exact text comes with the picture in text mode; graphical screens are read
                // on demand (vm_find_text), not on every screenshot.
                let text_mode = png.get(16..24) == Some(&[0, 0, 2, 0xd0, 0, 0, 1, 0x90][..]);
                let text = if text_mode {
                    m.text_screen().await.map_err(failure)?.text()
                } else {
                    String::new()
                };
                let (w, h) = (
                    png.get(16..20)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u32::from_be_bytes),
                    png.get(20..24)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u32::from_be_bytes),
                );
                let mut done = Executed::new(Outcome {
                    text: text.clone(),
                    output: json!({"vm": a.vm, "width": w, "height": h, "text": text, "png_bytes": png.len()}),
                    ..Outcome::default()
                });
                done.outcome.images.push(Image {
                    mime: "image/png".into(),
                    base64: base64::engine::general_purpose::STANDARD.encode(&png),
                });
                Ok(done)
            }
            VmAction::VmType(a) => {
                self.machine(&a.vm)?
                    .type_text(&a.text)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "typed": a.text.chars().count()})))
            }
            VmAction::VmKey(a) => {
                self.machine(&a.vm)?.key(&a.keys).await.map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "keys": a.keys})))
            }
            VmAction::VmClick(a) => {
                let button = a.button.as_deref().unwrap_or("left");
                if !["left", "middle", "right"].contains(&button) {
                    return Err(Failure::from(VmBodyError::InvalidArguments {
                        why: "button is left, middle or right".into(),
                    }));
                }
                self.machine(&a.vm)?
                    .click(a.x, a.y, button)
                    .await
                    .map_err(failure)?;
                Ok(out(
                    json!({"vm": a.vm, "x": a.x, "y": a.y, "button": button}),
                ))
            }
            VmAction::VmFindText(a) => {
                let ocr = self.ocr()?;
                let matches = self
                    .machine(&a.vm)?
                    .find_text(&a.text, &ocr)
                    .await
                    .map_err(failure)?;
                let source = matches.first().map_or("none", |m| m.source);
                Ok(out(
                    json!({"vm": a.vm, "text": a.text, "found": !matches.is_empty(), "matches": matches, "source": source}),
                ))
            }
            VmAction::VmWaitForText(a) => {
                let timeout = a
                    .timeout_ms
                    .unwrap_or(WAIT_FOR_TEXT_MS_DEFAULT)
                    .min(WAIT_FOR_TEXT_MS_MAX);
                let ocr = self.ocr()?;
                let found = self
                    .machine(&a.vm)?
                    .wait_for_screen_text(&a.text, &ocr, timeout)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "text": a.text, "match": found})))
            }
            VmAction::VmClickText(a) => {
                let ocr = self.ocr()?;
                let m = self.machine(&a.vm)?;
                let Some(found) = m
                    .find_text(&a.text, &ocr)
                    .await
                    .map_err(failure)?
                    .into_iter()
                    .next()
                else {
                    return Err(Failure::from(VmBodyError::TextNotFound {
                        why: format!("{:?} is not on the screen", a.text),
                    }));
                };
                m.click(found.center[0], found.center[1], "left")
                    .await
                    .map_err(failure)?;
                Ok(out(
                    json!({"vm": a.vm, "text": a.text, "clicked": found.center, "match": found}),
                ))
            }
            VmAction::VmSnapshotCreate(a) => {
                self.machine(&a.vm)?
                    .snapshot_save(&a.name)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "snapshot": a.name})))
            }
            VmAction::VmSnapshotRestore(a) => {
                self.machine(&a.vm)?
                    .snapshot_load(&a.name)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "restored": a.name})))
            }
            VmAction::VmSnapshotList(a) => {
                let names = self
                    .machine(&a.vm)?
                    .snapshot_list()
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "snapshots": names})))
            }
            VmAction::VmSnapshotDelete(a) => {
                self.machine(&a.vm)?
                    .snapshot_delete(&a.name)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "deleted": a.name})))
            }
            VmAction::VmForceOff(a) => {
                let machine = self.machines.remove(&a.vm).ok_or_else(|| {
                    Failure::from(VmBodyError::NotFound {
                        why: format!("no machine named {:?} is running", a.vm),
                    })
                })?;
                machine.force_off().await;
                Ok(out(json!({"vm": a.vm, "stopped": true, "forced": true})))
            }
            VmAction::VmReboot(a) => {
                self.machine(&a.vm)?.reboot().await.map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "rebooted": true})))
            }
            VmAction::VmMove(a) => {
                self.machine(&a.vm)?
                    .move_to(a.x, a.y)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "x": a.x, "y": a.y})))
            }
            VmAction::VmTripleClick(a) => {
                self.machine(&a.vm)?
                    .click_n(a.x, a.y, "left", 3)
                    .await
                    .map_err(failure)?;
                Ok(out(json!({"vm": a.vm, "x": a.x, "y": a.y, "clicks": 3})))
            }
            VmAction::VmDrag(a) => {
                self.machine(&a.vm)?
                    .drag((a.from_x, a.from_y), (a.to_x, a.to_y))
                    .await
                    .map_err(failure)?;
                Ok(out(
                    json!({"vm": a.vm, "from": [a.from_x, a.from_y], "to": [a.to_x, a.to_y]}),
                ))
            }
            VmAction::VmScroll(a) => {
                if a.amount.unsigned_abs() > 100 {
                    return Err(Failure::from(VmBodyError::InvalidArguments {
                        why: "amount is -100 to 100 wheel steps".into(),
                    }));
                }
                self.machine(&a.vm)?
                    .scroll(a.x, a.y, a.amount)
                    .await
                    .map_err(failure)?;
                Ok(out(
                    json!({"vm": a.vm, "x": a.x, "y": a.y, "amount": a.amount}),
                ))
            }
            VmAction::VmCursorPosition(a) => {
                let (x, y) = self.machine(&a.vm)?.cursor();
                Ok(out(json!({"vm": a.vm, "x": x, "y": y})))
            }
            VmAction::Computer(c) => {
                // Computer-use agents never call vm_start: the default machine boots on first use.
                if c.vm == "default" && !self.machines.contains_key("default") {
                    self.start("default", None, None, false).await?;
                }
                let sizing = aido_computer::Sizing::of(&self.args.computer);
                let mut screen = super::computer::MachineScreen(self.machine(&c.vm)?);
                let mut answer =
                    aido_computer::legacy(&mut screen, c.action, &c.input, sizing).await?;
                answer["vm"] = json!(c.vm);
                Ok(computed(
                    aido_walk::computer::render_legacy(c.action, &c.input, &answer),
                    answer,
                ))
            }
            VmAction::ComputerToolset(batch) => {
                if batch.vm == "default" && !self.machines.contains_key("default") {
                    self.start("default", None, None, false).await?;
                }
                let sizing = aido_computer::Sizing::of(&self.args.computer);
                let call = aido_actions::computer::ComputerToolset {
                    version: batch.version,
                    actions: batch.actions.clone(),
                };
                let mut screen = super::computer::MachineScreen(self.machine(&batch.vm)?);
                let mut answer = aido_computer::toolset(&mut screen, &call, sizing).await?;
                answer["vm"] = json!(batch.vm);
                Ok(computed(
                    aido_walk::computer::render_toolset(&call, &answer),
                    answer,
                ))
            }
            VmAction::VmClone(a) => {
                self.check_new_name(&a.vm)?;
                let dir = self.work_dir("clones").join(&a.vm);
                let spec = MachineSpec::text_console(&self.image()?);
                let source = self.machine(&a.source)?;
                let clone = aido_vm::pool::clone_machine(source, &spec, &dir)
                    .await
                    .map_err(failure)?;
                clone.resume().await.map_err(failure)?;
                let output = json!({"vm": a.vm, "source": a.source, "pid": clone.pid(), "accel": clone.accel()});
                self.machines.insert(a.vm.clone(), clone);
                self.origin.insert(a.vm.clone(), "vm_clone");
                Ok(out(output))
            }
            VmAction::VmDestroyClone(a) => {
                self.remove(&a.vm, "vm_clone")?.shutdown().await;
                let _ = std::fs::remove_dir_all(self.work_dir("clones").join(&a.vm));
                Ok(out(json!({"vm": a.vm, "destroyed": true})))
            }
            VmAction::VmPoolAcquire(a) => {
                self.check_new_name(&a.vm)?;
                if self.pool.is_none() {
                    let mut spec = MachineSpec::text_console(&self.image()?);
                    spec.boot_timeout_ms = self.args.limits.boot_timeout_ms;
                    let dir = self.work_dir("templates");
                    let size = self.args.limits.pool_size as usize;
                    self.pool = Some(
                        aido_vm::Pool::open(&spec, &dir, size)
                            .await
                            .map_err(failure)?,
                    );
                }
                let entropy = self.args.entropy();
                let pool = self.pool.as_mut().ok_or_else(|| {
                    Failure::from(VmBodyError::PoolFailed {
                        why: "no pool".into(),
                    })
                })?;
                let (clone, took) = pool.acquire(&entropy).await.map_err(failure)?;
                let output = json!({"vm": a.vm, "acquire_ms": took.as_secs_f64() * 1000.0, "pid": clone.pid(),
                                    "accel": clone.accel(), "pool": pool.status()});
                // Warm a replacement now, so the next acquire is as fast.
                pool.refill().await.map_err(failure)?;
                self.machines.insert(a.vm.clone(), clone);
                self.origin.insert(a.vm.clone(), "vm_pool_acquire");
                Ok(out(output))
            }
            VmAction::VmPoolRelease(a) => {
                let machine = self.remove(&a.vm, "vm_pool_acquire")?;
                match self.pool.as_mut() {
                    Some(pool) => pool.release(machine).await,
                    None => machine.shutdown().await,
                }
                Ok(out(json!({"vm": a.vm, "released": true})))
            }
            VmAction::VmPoolStatus(_) => {
                let status = self.pool.as_ref().map(|p| p.status());
                Ok(out(json!({"open": status.is_some(), "pool": status})))
            }
            VmAction::VmPoolShutdown(_) => {
                if let Some(mut pool) = self.pool.take() {
                    pool.shutdown().await;
                }
                Ok(out(json!({"open": false})))
            }
            VmAction::VmWait(a) => {
                if a.ms > 60_000 {
                    return Err(Failure::from(VmBodyError::InvalidArguments {
                        why: "ms is at most 60000".into(),
                    }));
                }
                tokio::time::sleep(std::time::Duration::from_millis(a.ms)).await;
                Ok(out(json!({"waited_ms": a.ms})))
            }
        }
    }
}

impl Body for VmBody {
    const NAME: &'static str = "vm";
    type Args = VmBodyArgs;
    type Msg = VmMsg;

    async fn build(args: VmBodyArgs) -> Result<Self, String> {
        Ok(Self {
            args,
            machines: BTreeMap::new(),
            origin: BTreeMap::new(),
            pool: None,
            templates: BTreeMap::new(),
            ocr: None,
        })
    }

    async fn handle(&mut self, msg: VmMsg, _calls: &Calls) {
        match msg {
            VmMsg::Run { action, reply } => {
                // One that can change a machine commits first, so its caller waits for the
                // answer.
                if let Some(reply) = reply.take(action.class().mutates()) {
                    let result = self.run(&action).await;
                    reply.send(result);
                }
            }
            VmMsg::Peek { vm, reply } => {
                let Some(reply) = reply.take(false) else {
                    return;
                };
                let peeked = match self.machine(&vm) {
                    Ok(m) => m
                        .screenshot_png()
                        .await
                        .map(|png| (png, m.cursor()))
                        .map_err(failure),
                    Err(f) => Err(f),
                };
                reply.send(peeked);
            }
            VmMsg::Names { reply } => {
                if let Some(reply) = reply.take(false) {
                    reply.send(Ok(self.machines.keys().cloned().collect()));
                }
            }
            VmMsg::PoolStatus { reply } => {
                if let Some(reply) = reply.take(false) {
                    reply.send(Ok(self.pool.as_ref().map(|p| p.status())));
                }
            }
            VmMsg::SnapshotAll { id, reply } => {
                let Some(reply) = reply.take(true) else {
                    return;
                };
                let mut done = Vec::new();
                let mut result = Ok(());
                for (name, machine) in &self.machines {
                    match machine.snapshot_save(&id).await {
                        Ok(()) => done.push(name.clone()),
                        Err(e) => {
                            result = Err(failure(e));
                            break;
                        }
                    }
                }
                reply.send(result.map(|_| done));
            }
            VmMsg::RestoreAll {
                id,
                machines,
                reply,
            } => {
                let Some(reply) = reply.take(true) else {
                    return;
                };
                let mut done = Vec::new();
                let mut result = Ok(());
                for name in machines {
                    // A machine stopped since has nothing to go back to.
                    let Some(machine) = self.machines.get(&name) else {
                        continue;
                    };
                    match machine.snapshot_load(&id).await {
                        Ok(()) => done.push(name),
                        Err(e) => {
                            result = Err(failure(e));
                            break;
                        }
                    }
                }
                reply.send(result.map(|_| done));
            }
        }
    }

    async fn stop(&mut self) {
        for (_, machine) in std::mem::take(&mut self.machines) {
            machine.shutdown().await;
        }
    }
}

impl VmBodyArgs {
    fn entropy(&self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        self.clock.random(&mut seed);
        seed
    }
}
