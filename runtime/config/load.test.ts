// All of the runtime's environment goes through the loader: SBX_CONFIG, SBX_PORT, SBX_HOST,
// SBX_LOG_LEVEL, SBX_OWNER. A bad value is a ValidationError that names the variable.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ValidationError } from "../core/errors.ts";
import { loadProcessSettings, loadRuntimeConfig } from "./load.ts";

const dir = mkdtempSync(join(tmpdir(), "sbx-load-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const cwd = dir;

describe("loadRuntimeConfig: SBX_PORT and SBX_HOST", () => {
  it.each([
    [{}, { host: "127.0.0.1", port: 8080 }],
    [{ SBX_PORT: "9001" }, { host: "127.0.0.1", port: 9001 }],
    [{ SBX_PORT: "0" }, { host: "127.0.0.1", port: 0 }],
    [{ SBX_HOST: "0.0.0.0" }, { host: "0.0.0.0", port: 8080 }],
    [
      { SBX_HOST: "::", SBX_PORT: "65535" },
      { host: "::", port: 65535 },
    ],
  ])("%j -> listen %j", (env, listen) => {
    expect(loadRuntimeConfig(env, cwd).config.listen).toEqual(listen);
  });

  it("override the config file's listen", () => {
    const file = join(dir, "listen.json");
    writeFileSync(file, JSON.stringify({ listen: { host: "127.0.0.2", port: 7000 } }));
    expect(loadRuntimeConfig({ SBX_CONFIG: file }, cwd).config.listen).toEqual({ host: "127.0.0.2", port: 7000 });
    expect(loadRuntimeConfig({ SBX_CONFIG: file, SBX_PORT: "7001" }, cwd).config.listen).toEqual({
      host: "127.0.0.2",
      port: 7001,
    });
  });

  it.each([
    [{ SBX_PORT: "abc" }, 'SBX_PORT: invalid value "abc"'],
    [{ SBX_PORT: "" }, 'SBX_PORT: invalid value ""'],
    [{ SBX_PORT: "70000" }, 'SBX_PORT: invalid value "70000"'],
    [{ SBX_PORT: " 80" }, 'SBX_PORT: invalid value " 80"'],
    [{ SBX_PORT: "-1" }, 'SBX_PORT: invalid value "-1"'],
    [{ SBX_HOST: "" }, 'SBX_HOST: invalid value ""'],
    [{ SBX_HOST: "a b" }, 'SBX_HOST: invalid value "a b"'],
  ])("%j is refused: %s", (env, message) => {
    let err: unknown;
    try {
      loadRuntimeConfig(env, cwd);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as Error).message).toContain(message);
    expect((err as Error).message).toMatch(/or unset it/);
  });
});

describe("loadProcessSettings", () => {
  it("defaults", () => {
    expect(loadProcessSettings({})).toEqual({
      logLevel: "info",
      owner: "local",
      role: { role: "all", source: "default" },
    });
  });

  it("takes SBX_LOG_LEVEL and SBX_OWNER", () => {
    expect(loadProcessSettings({ SBX_LOG_LEVEL: "debug", SBX_OWNER: "alice" })).toMatchObject({
      logLevel: "debug",
      owner: "alice",
    });
  });

  it("takes the role from the argument over SBX_ROLE, and the Lease identity from POD_NAME", () => {
    expect(loadProcessSettings({ SBX_ROLE: "manager", POD_NAME: "sbx-controller-7d9f-x2" }, ["controller"])).toEqual({
      logLevel: "info",
      owner: "local",
      role: { role: "controller", source: "argv", overridden: "SBX_ROLE=manager" },
      identity: "sbx-controller-7d9f-x2",
    });
  });

  it.each([
    [
      { SBX_LOG_LEVEL: "loud" },
      'SBX_LOG_LEVEL: invalid value "loud": use one of: fatal, error, warn, info, debug, trace, silent',
    ],
    [{ SBX_OWNER: " " }, 'SBX_OWNER: invalid value " "'],
    [{ SBX_ROLE: "worker" }, 'SBX_ROLE: invalid value "worker": use one of: all, manager, controller'],
  ])("%j is refused: %s", (env, message) => {
    expect(() => loadProcessSettings(env)).toThrow(message);
  });
});
