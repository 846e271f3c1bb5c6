// vendor.mjs copies the browser builds of the UI's npm libraries, with their
// licenses, into vendor/ (embedded by the Go package). Reproduce with:
//   npm ci --ignore-scripts && npm run vendor
import { copyFileSync, mkdirSync, readFileSync } from "node:fs";

const files = [
  ["node_modules/marked/lib/marked.esm.js", "vendor/marked.esm.js"],
  ["node_modules/marked/LICENSE.md", "vendor/marked.LICENSE.md"],
  ["node_modules/dompurify/dist/purify.es.mjs", "vendor/purify.es.mjs"],
  ["node_modules/dompurify/LICENSE", "vendor/dompurify.LICENSE"],
];
mkdirSync("vendor", { recursive: true });
for (const [from, to] of files) {
  copyFileSync(from, to);
}
const versions = ["marked", "dompurify"].map(
  (p) => `${p} ${JSON.parse(readFileSync(`node_modules/${p}/package.json`, "utf8")).version}`,
);
console.log(`vendored ${versions.join(", ")}`);
