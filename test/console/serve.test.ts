// How the service serves the console (runtime/server/console.ts), in-process: the security
// headers on every answer, the refusal on a sandbox's preview origin, the answer when nothing is
// built, and the runtime bundle carrying the same assets for a deployed runtime.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Fastify from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildRuntimeCode } from "../../components/runtime/bundle.ts";
import { buildConsoleAssets, writeConsole } from "../../console/build.ts";
import { silentLogger } from "../../runtime/core/log.ts";
import { buildApp } from "../../runtime/server/app.ts";
import { EMBEDDED_CONSOLE_GLOBAL, isPreviewHost, registerConsole } from "../../runtime/server/console.ts";
import { type LocalRuntime, startLocalRuntime, testTokens } from "../support/local.ts";

let rt: LocalRuntime;
beforeAll(async () => {
  writeConsole();
  rt = await startLocalRuntime();
}, 120_000);
afterAll(async () => {
  await rt?.close();
});

const CSP_PARTS = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "frame-ancestors 'none'",
];

describe("serving /console", () => {
  it.each(["/console/", "/console/app.js", "/console/app.css", "/console/nope.js"])(
    "%s carries a strict CSP, nosniff, no referrer and no framing",
    async (url) => {
      const res = await rt.app.inject({ method: "GET", url });
      const csp = String(res.headers["content-security-policy"]);
      for (const part of CSP_PARTS) expect(csp).toContain(part);
      expect(csp).not.toContain("unsafe");
      expect(res.headers["x-content-type-options"]).toBe("nosniff");
      expect(res.headers["referrer-policy"]).toBe("no-referrer");
      expect(res.headers["x-frame-options"]).toBe("DENY");
      expect(res.headers["set-cookie"]).toBeUndefined();
    },
  );

  it("serves the page, its script and style; /console redirects; an unknown file is our 404", async () => {
    const page = await rt.app.inject({ method: "GET", url: "/console/" });
    expect(page.statusCode).toBe(200);
    expect(page.headers["content-type"]).toBe("text/html; charset=utf-8");
    // nothing inline: the page loads its own script and style only
    expect(page.body).toContain('<script src="app.js" defer></script>');
    expect(page.body).not.toMatch(/<script>|<style|style=|\son[a-z]+=/);
    expect((await rt.app.inject({ method: "GET", url: "/console/app.js" })).headers["content-type"]).toBe(
      "text/javascript; charset=utf-8",
    );
    const bare = await rt.app.inject({ method: "GET", url: "/console" });
    expect([bare.statusCode, bare.headers.location]).toEqual([308, "/console/"]);
    const missing = await rt.app.inject({ method: "GET", url: "/console/..%2fpackage.json" });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.message).toContain('no console file "../package.json"');
  });

  it("gives each page load its own style nonce, in the CSP and on the stylesheet link alone", async () => {
    const nonces = [];
    for (let i = 0; i < 2; i++) {
      const res = await rt.app.inject({ method: "GET", url: "/console/" });
      const nonce = /style-src 'self' 'nonce-([A-Za-z0-9+/]{22}==)';/.exec(
        String(res.headers["content-security-policy"]),
      )?.[1];
      expect(nonce, String(res.headers["content-security-policy"])).toBeDefined();
      expect(res.body).toContain(`<link rel="stylesheet" href="app.css" nonce="${nonce}">`);
      expect(res.body.split(nonce!)).toHaveLength(2);
      expect(res.headers["cache-control"]).toBe("no-store");
      nonces.push(nonce);
    }
    expect(nonces[0]).not.toBe(nonces[1]);
    // scripts take no nonce, and nothing but the page has one
    const csp = String((await rt.app.inject({ method: "GET", url: "/console/" })).headers["content-security-policy"]);
    expect(csp).toContain("script-src 'self';");
    expect(
      String((await rt.app.inject({ method: "GET", url: "/console/xterm.js" })).headers["content-security-policy"]),
    ).toContain("style-src 'self';");
  });

  it("the built script writes no markup from strings (no innerHTML, no insertAdjacentHTML)", () => {
    // xterm.js too: the terminal draws a program's output as text
    for (const name of ["app.js", "xterm.js"])
      expect(buildConsoleAssets()[name]).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write/);
  });

  it.each([
    ["3000-sbx-abc.preview.example", true],
    ["49983-sbx-abc.preview.example:8080", true],
    ["anything.PREVIEW.example.", true],
    ["preview.example", false],
    ["api.example", false],
    ["127.0.0.1:8080", false],
  ])("host %s is a preview origin: %s", (host, preview) => {
    expect(isPreviewHost(host, "preview.example")).toBe(preview);
  });

  it("refuses the console on a sandbox's preview origin, serves it on the service's own host", async () => {
    const app = buildApp({
      manager: rt.manager,
      tokens: testTokens(),
      logger: silentLogger(),
      ports: { domain: "preview.example" },
    });
    try {
      // envd's host is not a port the relay takes: without the check it would reach the console
      const res = await app.inject({
        method: "GET",
        url: "/console/",
        headers: { host: "49983-sbx-abc.preview.example" },
      });
      expect(res.statusCode).toBe(404);
      expect(res.json().error.message).toContain("the console is not served on a sandbox's preview origin");
      expect(res.headers["content-security-policy"]).toContain("frame-ancestors 'none'");
      const own = await app.inject({ method: "GET", url: "/console/", headers: { host: "preview.example" } });
      expect(own.statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it("answers 503 naming the build command when the assets are not built", async () => {
    const empty = mkdtempSync(join(tmpdir(), "sbx-console-"));
    const app = Fastify();
    registerConsole(app, { assetsDir: join(empty, "none") });
    try {
      const res = await app.inject({ method: "GET", url: "/console/" });
      expect(res.statusCode).toBe(503);
      expect(res.json().error.message).toContain("npm run build:console");
    } finally {
      await app.close();
      rmSync(empty, { recursive: true, force: true });
    }
  });

  it("the runtime bundle carries the console, and a bundled runtime serves it with no dist/ beside it", async () => {
    const code = buildRuntimeCode(fileURLToPath(new URL("../infra/fixtures/entry.ts", import.meta.url)));
    // the banner's last assignment, ending its line (JSON.stringify leaves no raw newline inside)
    const carried = new RegExp(`globalThis\\.${EMBEDDED_CONSOLE_GLOBAL}=(\\{[^\\n]*\\});\\n`).exec(code)?.[1];
    expect(carried, "the banner sets the console's global").toBeDefined();
    expect(JSON.parse(carried!)).toEqual(buildConsoleAssets());
    const g = globalThis as Record<string, unknown>;
    g[EMBEDDED_CONSOLE_GLOBAL] = JSON.parse(carried!);
    const app = Fastify();
    registerConsole(app, { assetsDir: "/nonexistent" });
    try {
      const res = await app.inject({ method: "GET", url: "/console/app.js" });
      expect(res.statusCode).toBe(200);
      expect(res.body).toBe(buildConsoleAssets()["app.js"]);
    } finally {
      delete g[EMBEDDED_CONSOLE_GLOBAL];
      await app.close();
    }
  }, 120_000);
});
