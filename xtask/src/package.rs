//! The Node and Python packages, built and tested as users install them.
//!
//! `package npm [--release]`: the npm package of `bindings/node` as a
//! tarball under `target/package/`; `test-npm [--release]`: that tarball
//! installed into a fresh project with the pinned dependencies of
//! `bindings/node/test/package.json`, and its tests run there.
//! `package python [--release]`: the wheel of `bindings/python` under
//! `target/wheels/`;
//! `test-python [--release]`: that wheel installed into a fresh venv with
//! the pinned packages of `bindings/python/tests/requirements.txt`, then
//! pytest and `mypy --strict` there.
//!
//! Both native modules are built by one cargo invocation that selects what
//! `cargo test` selects (debug: `--lib --bins --tests`), so they reuse the
//! crates the test run compiled, with the same features; a per-package
//! build (`-p codemode-node`, or maturin's) would resolve other features
//! and compile wasmtime and its kin a second time. So the wheel is
//! assembled here from that build and zipped by PyPA's `wheel pack`
//! (pinned); `bindings/python/pyproject.toml` (maturin) stays the way to
//! build it from source with pip.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use xtask::workspace_root;

use crate::{cargo, have, run};

/// The package's files besides the addon (`files` of its package.json).
const PACKAGE_FILES: &[&str] = &[
    "index.js",
    "index.d.ts",
    "native.js",
    "README.md",
    "bin/codemode.js",
    "adapters/ai.js",
    "adapters/ai.d.ts",
    "adapters/openai-agents.js",
    "adapters/openai-agents.d.ts",
];

/// The test project's files, from `bindings/node/test/`.
const TEST_FILES: &[&str] = &[
    "api.test.mjs",
    "adapters.test.mjs",
    "clients.test.mjs",
    "types.ts",
    "tsconfig.json",
    "bench.mjs",
];

fn profile(release: bool) -> &'static str {
    if release { "release" } else { "debug" }
}

/// npm's names for this machine (`process.platform`, `process.arch`).
fn npm_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        other => other,
    };
    (std::env::consts::OS, arch)
}

/// Builds the addon and packs the package; returns the tarball's path.
/// Builds the native modules and the `codemode` binary: in debug, with
/// the selection (and so the features) of `cargo test`, reusing its
/// crates; in release, the three packages in one invocation.
pub(crate) fn build_native(release: bool) -> Result<()> {
    let mut build = cargo();
    build
        .current_dir(workspace_root())
        .args(["build", "--locked"]);
    if release {
        build.args([
            "--release",
            "-p",
            "codemode-node",
            "-p",
            "codemode-python",
            "-p",
            "codemode",
        ]);
    } else {
        build.args(["--lib", "--bins", "--tests"]);
    }
    run(&mut build)
}

pub(crate) fn package_npm(release: bool) -> Result<PathBuf> {
    let root = workspace_root();
    build_native(release)?;
    let source = root.join("bindings/node");
    let out = root.join("target/package");
    let staging = out.join("npm/codemode");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    for file in PACKAGE_FILES {
        let to = staging.join(file);
        std::fs::create_dir_all(to.parent().context("no parent")?)?;
        std::fs::copy(source.join(file), &to)
            .with_context(|| format!("copying bindings/node/{file}"))?;
    }
    // The addon of this machine: say so in the manifest, so npm refuses it
    // elsewhere with a clear message instead of a load error.
    let manifest = std::fs::read_to_string(source.join("package.json"))?;
    let mut manifest: serde_json::Value = serde_json::from_str(&manifest)?;
    let (os, cpu) = npm_platform();
    manifest["os"] = serde_json::json!([os]);
    manifest["cpu"] = serde_json::json!([cpu]);
    std::fs::write(
        staging.join("package.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    copy_native(
        release,
        "libcodemode_node.so",
        &staging.join("codemode.node"),
    )?;
    run(Command::new("npm")
        .current_dir(&staging)
        .args(["pack", "--silent", "--pack-destination"])
        .arg(&out))?;
    let version = manifest["version"]
        .as_str()
        .context("package.json has no version")?;
    let tarball = out.join(format!("codemode-{version}.tgz"));
    if !tarball.exists() {
        bail!("npm pack did not write {}", tarball.display());
    }
    wrote(tarball)
}

/// Copies the native module `built` (in `target/<profile>/`) to `to`,
/// without its line tables: they are for debugging the workspace, not for
/// users (about a third of a debug module).
fn copy_native(release: bool, built: &str, to: &std::path::Path) -> Result<()> {
    let built = workspace_root().join(format!("target/{}/{built}", profile(release)));
    std::fs::copy(&built, to).with_context(|| format!("copying {}", built.display()))?;
    if have("strip") {
        run(Command::new("strip").arg("--strip-debug").arg(to))?;
    }
    Ok(())
}

/// Says where a package landed, and how big it is.
fn wrote(path: PathBuf) -> Result<PathBuf> {
    let size = std::fs::metadata(&path)?.len();
    eprintln!("xtask: wrote {} ({size} bytes)", path.display());
    Ok(path)
}

/// A fresh directory at `dir` (removed first when it exists).
fn fresh_dir(dir: &std::path::Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}

/// Packs, installs into a fresh project, runs the package's tests there.
pub(crate) fn test_npm(release: bool) -> Result<()> {
    let root = workspace_root();
    // Also builds the binary the README's cargo route uses.
    let tarball = package_npm(release)?;
    let project = root.join("target/package/test-project");
    fresh_dir(&project)?;
    let tests = root.join("bindings/node/test");
    let manifest = std::fs::read_to_string(tests.join("package.json"))?;
    let mut manifest: serde_json::Value = serde_json::from_str(&manifest)?;
    manifest["dependencies"]["codemode"] =
        serde_json::Value::String(format!("file:{}", tarball.display()));
    std::fs::write(
        project.join("package.json"),
        serde_json::to_string_pretty(&manifest)?,
    )?;
    for file in TEST_FILES {
        std::fs::copy(tests.join(file), project.join(file))
            .with_context(|| format!("copying bindings/node/test/{file}"))?;
    }
    run(Command::new("npm").current_dir(&project).args([
        "install",
        "--no-audit",
        "--no-fund",
        "--loglevel",
        "error",
    ]))?;
    run(Command::new("node")
        .current_dir(&project)
        .args(["--test", "--test-concurrency=1"])
        .args(TEST_FILES.iter().filter(|f| f.ends_with(".test.mjs")))
        .env("CODEMODE_README", root.join("README.md"))
        .env(
            "CODEMODE_BIN",
            root.join(format!("target/{}/codemode", profile(release))),
        ))?;
    run(Command::new(project.join("node_modules/.bin/tsc"))
        .current_dir(&project)
        .args(["-p", "tsconfig.json"]))?;
    Ok(())
}

/// `package npm [--release]` / `test-npm [--release]` arguments.
pub(crate) fn release_flag(args: &[String], usage: &str) -> Result<bool> {
    match args {
        [] => Ok(false),
        [flag] if flag == "--release" => Ok(true),
        _ => bail!("usage: {usage}"),
    }
}

/// PyPA's `wheel`, pinned: zips an unpacked wheel and writes its RECORD.
const WHEEL_TOOL: &str = "wheel==0.45.1";

/// The test files of the pip package, from `bindings/python/tests/`.
const PYTHON_TEST_FILES: &[&str] = &[
    "test_api.py",
    "test_adapters.py",
    "test_clients.py",
    "typed_usage.py",
    "bench.py",
];

/// A fresh venv at `dir` (removed first); returns its `bin/`.
fn fresh_venv(dir: &std::path::Path) -> Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    run(Command::new("python3").args(["-m", "venv"]).arg(dir))?;
    Ok(dir.join("bin"))
}

/// The wheel's `METADATA`, from `pyproject.toml`'s `[project]`.
fn wheel_metadata(pyproject: &toml_edit::DocumentMut) -> Result<(String, String)> {
    let project = pyproject["project"]
        .as_table()
        .context("pyproject.toml has no [project]")?;
    let text = |key: &str| -> Result<String> {
        project
            .get(key)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .with_context(|| format!("pyproject.toml: [project].{key} is missing"))
    };
    let version = text("version")?;
    let mut metadata = format!(
        "Metadata-Version: 2.1\nName: {}\nVersion: {version}\nSummary: {}\nLicense: Apache-2.0\nRequires-Python: {}\n",
        text("name")?,
        text("description")?,
        text("requires-python")?,
    );
    if let Some(extras) = project
        .get("optional-dependencies")
        .and_then(|v| v.as_table())
    {
        for (extra, requirements) in extras {
            metadata.push_str(&format!("Provides-Extra: {extra}\n"));
            for requirement in requirements.as_array().into_iter().flatten() {
                if let Some(requirement) = requirement.as_str() {
                    metadata.push_str(&format!(
                        "Requires-Dist: {requirement}; extra == \"{extra}\"\n"
                    ));
                }
            }
        }
    }
    metadata.push_str("Description-Content-Type: text/markdown\n\n");
    metadata.push_str(&std::fs::read_to_string(
        workspace_root().join("bindings/python/README.md"),
    )?);
    Ok((version, metadata))
}

/// Builds the native module and assembles the wheel; returns its path.
pub(crate) fn package_python(release: bool) -> Result<PathBuf> {
    let root = workspace_root();
    let tools = root.join("target/tools/python-build");
    let pinned = std::fs::read_to_string(tools.join("pinned")).unwrap_or_default();
    if !tools.join("bin/wheel").exists() || pinned.trim() != WHEEL_TOOL {
        let bin = fresh_venv(&tools)?;
        run(Command::new(bin.join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            WHEEL_TOOL,
        ]))?;
        std::fs::write(tools.join("pinned"), WHEEL_TOOL)?;
    }
    build_native(release)?;
    let source = root.join("bindings/python");
    let pyproject: toml_edit::DocumentMut =
        std::fs::read_to_string(source.join("pyproject.toml"))?.parse()?;
    let (version, metadata) = wheel_metadata(&pyproject)?;
    let unpacked = root.join(format!("target/package/python-wheel/codemode-{version}"));
    if unpacked.exists() {
        std::fs::remove_dir_all(&unpacked)?;
    }
    let package = unpacked.join("codemode");
    std::fs::create_dir_all(&package)?;
    for entry in std::fs::read_dir(source.join("python/codemode"))? {
        let path = entry?.path();
        if path.is_file() {
            std::fs::copy(
                &path,
                package.join(path.file_name().context("no file name")?),
            )?;
        }
    }
    copy_native(release, "lib_native.so", &package.join("_native.abi3.so"))?;
    // The platform the module was built for, as pip names it.
    let platform = Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_platform())"])
        .output()
        .context("python3 is needed to name the wheel's platform")?;
    let platform = String::from_utf8_lossy(&platform.stdout)
        .trim()
        .replace(['-', '.'], "_");
    let dist_info = unpacked.join(format!("codemode-{version}.dist-info"));
    std::fs::create_dir_all(&dist_info)?;
    std::fs::write(dist_info.join("METADATA"), metadata)?;
    std::fs::write(
        dist_info.join("WHEEL"),
        format!(
            "Wheel-Version: 1.0\nGenerator: codemode xtask\nRoot-Is-Purelib: false\nTag: cp310-abi3-{platform}\n"
        ),
    )?;
    let scripts = pyproject["project"]["scripts"]
        .as_table()
        .context("pyproject.toml has no [project.scripts]")?;
    let mut entry_points = String::from("[console_scripts]\n");
    for (name, target) in scripts {
        entry_points.push_str(&format!(
            "{name} = {}\n",
            target.as_str().unwrap_or_default()
        ));
    }
    std::fs::write(dist_info.join("entry_points.txt"), entry_points)?;
    let out = root.join("target/wheels");
    fresh_dir(&out)?;
    run(Command::new(tools.join("bin/wheel"))
        .args(["pack", "--dest-dir"])
        .arg(&out)
        .arg(&unpacked))?;
    let wheel = std::fs::read_dir(&out)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .context("wheel pack wrote no wheel")?;
    wrote(wheel)
}

/// Builds the wheel, installs it into a fresh venv, runs its tests there.
pub(crate) fn test_python(release: bool) -> Result<()> {
    let root = workspace_root();
    let wheel = package_python(release)?;
    let everything =
        root.join("e2e/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !everything.exists() {
        crate::npm_install()?;
    }
    let project = root.join("target/package/python");
    let bin = fresh_venv(&project.join("venv"))?;
    let tests = root.join("bindings/python/tests");
    // Exactly the pinned set, then the wheel (it has no dependencies).
    let requirements = tests.join("requirements.txt");
    for what in [
        &["-r".as_ref(), requirements.as_os_str()][..],
        &[wheel.as_os_str()][..],
    ] {
        run(Command::new(bin.join("pip"))
            .args([
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
            ])
            .args(what))?;
    }
    let copied = project.join("tests");
    std::fs::create_dir_all(&copied)?;
    for file in PYTHON_TEST_FILES {
        std::fs::copy(tests.join(file), copied.join(file))
            .with_context(|| format!("copying bindings/python/tests/{file}"))?;
    }
    let python = bin.join("python");
    run(Command::new(&python)
        .current_dir(&project)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(
            PYTHON_TEST_FILES
                .iter()
                .filter(|f| f.starts_with("test_"))
                .map(|f| format!("tests/{f}")),
        )
        .env("CODEMODE_README", root.join("README.md"))
        .env("CODEMODE_WHEEL", &wheel)
        .env("CODEMODE_EVERYTHING", &everything)
        .env("UV_CACHE_DIR", project.join("uv-cache"))
        // uvx must use this machine's Python, never download one.
        .env("UV_PYTHON_DOWNLOADS", "never"))?;
    // The package's own types, then a file using them as the tests do.
    for target in [&["-p", "codemode"][..], &["tests/typed_usage.py"][..]] {
        run(Command::new(&python)
            .current_dir(&project)
            .args([
                "-m",
                "mypy",
                "--strict",
                "--warn-unused-ignores",
                "--cache-dir",
            ])
            .arg(project.join("mypy-cache"))
            .args(target))?;
    }
    Ok(())
}
