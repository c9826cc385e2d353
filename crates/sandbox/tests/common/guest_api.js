// A test-only guest API for the sandbox's own tests and benches: the
// sandbox's default guest API is empty, and these tests need one way for a
// cell to wait on the host. `yield_control` sends a "yield" request the
// tests answer themselves and resolves to undefined, whatever they send.
(function (bridge) {
  "use strict";
  const StringCtor = String;
  bridge.defineGlobal("yield_control", function yield_control(reason) {
    const r = reason === undefined ? null : StringCtor(reason);
    return bridge.hostRequest("yield", { reason: r }).then(() => undefined);
  });
  return function install() {};
})
