//! The prelude the guest evaluates before the base image is baked: the
//! sandbox's engine prelude (`prelude.js`: JSON adapter, output, host
//! requests, the ABI hooks) composed with the embedder's [`GuestApi`].
//!
//! The guest evaluates the prelude as one script whose value is a function
//! it calls with its natives (see the guest's `cm_init`). The engine
//! prelude is a function of `(natives, guestApi)`, so the composed text
//! binds the guest API first: the guest wasm does not change when the guest
//! API does, only the baked image (and so the build id) does.

use std::borrow::Cow;
use std::sync::Arc;

/// The engine side of the prelude.
const ENGINE_PRELUDE: &str = include_str!("prelude.js");

/// The globals the engine prelude defines (`prelude.js`; a test pins the
/// two together). Whoever lets others name globals (plugin namespaces)
/// must keep clear of them.
pub const PRELUDE_GLOBALS: &[&str] = &["text", "json", "require", "fetch"];

/// A guest API: JavaScript source of one function expression
/// `(function (bridge) { ...; return function install(context) { ... }; })`.
///
/// The engine prelude calls it once, before the base image is baked, with a
/// frozen `bridge` of
/// - `hostRequest(method, params)`: sends `{"method", "params"}` to the host
///   and returns the promise the host settles (`method` must be a constant:
///   it is not quoted);
/// - `idRequest(method, id)`: a function of `input` sending
///   `{"method", "params": {"id", "input"}}` (the JSON before the input is
///   built once);
/// - `defineGlobal(name, value)`: a non-writable, non-configurable global;
/// - `intrinsics`: a frozen null-prototype object of intrinsics captured
///   before any cell could replace them (`isArray`, `freeze`,
///   `defineProperty`, `createObject`, `ErrorCtor`, `TypeErrorCtor`,
///   `StringCtor`, `parseJson`).
///
/// It returns `install(context)`, called once per run with the parsed run
/// context (the JSON text given to [`crate::Sandbox::start_with_context`]),
/// before the cell body starts. The sandbox gives the method names and the
/// context no meaning: the embedder answers the requests.
///
/// The text is trusted (it runs before any cell, with the engine's
/// intrinsics intact) and is part of the base image's cache key and build
/// id: snapshots of one guest API are refused by a sandbox with another.
#[derive(Clone, PartialEq, Eq)]
pub struct GuestApi(Arc<Cow<'static, str>>);

impl GuestApi {
    /// The sandbox's default: no globals, and an `install` that ignores the
    /// run context. Cells still have `text` and `json`.
    pub const EMPTY_SOURCE: &'static str = "(function () { return function () {}; })";

    /// A guest API from its source (see the type docs).
    pub fn new(source: impl Into<Cow<'static, str>>) -> GuestApi {
        GuestApi(Arc::new(source.into()))
    }

    /// Its JavaScript source.
    pub fn source(&self) -> &str {
        &self.0
    }
}

impl Default for GuestApi {
    fn default() -> Self {
        GuestApi::new(GuestApi::EMPTY_SOURCE)
    }
}

impl std::fmt::Debug for GuestApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The source is long; its size is enough to tell configurations apart.
        write!(f, "GuestApi({} bytes)", self.0.len())
    }
}

/// The prelude text the guest evaluates: a function of the guest's natives
/// that runs the engine prelude with `guest_api`. Newlines around each part
/// keep a trailing `//` comment in either from swallowing what follows.
pub(crate) fn compose(guest_api: &GuestApi) -> String {
    let mut text = String::with_capacity(ENGINE_PRELUDE.len() + guest_api.source().len() + 128);
    text.push_str("(function (engine, guestApi) {\n");
    text.push_str("  return function (natives) { return engine(natives, guestApi); };\n");
    text.push_str("})(\n");
    text.push_str(ENGINE_PRELUDE);
    text.push_str("\n,\n");
    text.push_str(guest_api.source());
    text.push_str("\n)\n");
    text
}

#[cfg(test)]
mod globals_tests {
    use super::{ENGINE_PRELUDE, PRELUDE_GLOBALS};

    #[test]
    fn prelude_globals_are_exactly_what_prelude_js_defines() {
        let mut defined: Vec<&str> = ENGINE_PRELUDE
            .split("defineGlobal(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        defined.sort_unstable();
        let mut listed = PRELUDE_GLOBALS.to_vec();
        listed.sort_unstable();
        assert_eq!(defined, listed);
    }

    /// The adapter refuses values nested deeper than the host parses and
    /// the guest's fast encoder writes: one limit, `codemode_abi`'s.
    #[test]
    fn the_adapter_depth_is_the_abi_depth() {
        let line = format!("const MAX_DEPTH = {};", codemode_abi::MAX_JSON_DEPTH);
        assert!(
            ENGINE_PRELUDE.contains(&line),
            "prelude.js must say `{line}`"
        );
    }
}
