// Builds ../apps_todo_detail.html: view.js and the official MCP Apps SDK (`@modelcontextprotocol/ext-apps`)
// bundled by esbuild into one inline script, under a CSP that allows that script and style by hash
// and nothing else (no fetch, image, font, media or frame source).
//
//   node src/switchboard/mcp/apps_view/build.mjs [--check]
//
// The packages come from tests/interop/node_modules (pinned by its package-lock.json; `make interop`
// installs them). With --check it only compares and exits 1 when the committed file is stale.
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = resolve(here, "../../../../tests/interop/node_modules");
const { build } = await import(join(modules, "esbuild", "lib", "main.js"));
const target = resolve(here, "../apps_todo_detail.html");

// zod (under the SDK) re-exports every locale's messages as `z.locales`; the view uses only English,
// which zod installs itself, so the index is cut down to it (about 260 KB less).
const englishOnly = {
  name: "zod-english-only",
  setup(b) {
    b.onLoad({ filter: /[\\/]zod[\\/]v4[\\/]locales[\\/]index\.js$/ }, (args) => ({
      contents: 'export { default as en } from "./en.js";', loader: "js", resolveDir: dirname(args.path),
    }));
  },
};
const bundled = await build({
  entryPoints: [join(here, "view.js")], bundle: true, format: "iife", minify: true, write: false,
  nodePaths: [modules], target: "es2020", legalComments: "eof", logLevel: "error", plugins: [englishOnly],
});
const script = bundled.outputFiles[0].text.replaceAll("</script", "<\\/script").trimEnd();
const style = readFileSync(join(here, "view.css"), "utf8").trimEnd();
const hash = (text) => `'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`;
const csp = [
  "default-src 'none'", `script-src ${hash(script)}`, `style-src ${hash(style)}`, "img-src 'none'",
  "connect-src 'none'", "font-src 'none'", "media-src 'none'", "frame-src 'none'", "worker-src 'none'",
  "form-action 'none'", "base-uri 'none'",
].join("; ");
const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Todo</title>
<style>${style}</style>
</head>
<body>
<main id="root"><p class="empty">Waiting for the todo…</p></main>
<script>${script}</script>
</body>
</html>
`;
if (process.argv.includes("--check")) {
  const current = readFileSync(target, "utf8");
  if (current !== html) {
    console.error("apps_todo_detail.html is stale: run node src/switchboard/mcp/apps_view/build.mjs");
    process.exit(1);
  }
} else {
  writeFileSync(target, html);
  console.log(`wrote ${target} (${html.length} bytes)`);
}
