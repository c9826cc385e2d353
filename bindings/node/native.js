// Loads the native addon built for this machine (`cargo xtask package npm`
// puts it beside this file as codemode.node).
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
let native;
try {
  native = require("./codemode.node");
} catch (e) {
  throw new Error(
    `codemode: the native addon (codemode.node) could not be loaded: ${e.message}. ` +
      "This package holds the addon of the machine it was built on; build it for this one with `cargo xtask package npm` in the codemode repository.",
  );
}
export default native;
