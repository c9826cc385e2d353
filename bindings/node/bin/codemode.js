#!/usr/bin/env node
// The codemode command line (serve, exec, wait, catalog, check-config,
// approvals, login, logout) from the native addon: no Rust toolchain needed.
import native from "../native.js";

// Runs on this thread until the command ends (`serve`: until the client
// goes or a signal stops it), then exits with its status.
const status = native.runCli(["codemode", ...process.argv.slice(2)]);
process.exit(status);
