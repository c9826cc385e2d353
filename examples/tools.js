// Run with: cargo run -p codemode -- exec --tools examples/tools.json5 examples/tools.js
const hits = await tools.search("forecast");
const cities = ["Berlin", "Lisbon", "Oslo"];
const forecasts = await Promise.all(cities.map((city) => tools.call(hits[0].id, { city })));
text(`catalog: ${ALL_TOOLS.map((t) => t.id).join(", ")}`);
let charge;
try {
  await tools.charge({ cents: 100 });
} catch (e) {
  charge = e.message;
}
return { forecasts: cities.map((c, i) => `${c}: ${forecasts[i].tempC}°C`), charge };
