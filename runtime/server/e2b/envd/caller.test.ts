import { describe, expect, it } from "vitest";
import { resolveSandboxPath, sandboxIdFrom, userFromAuthorization, validateUser } from "./caller.ts";

describe("envd request naming", () => {
  it.each([
    [{ "e2b-sandbox-id": "sbx-abc" }, "sbx-abc"],
    [{ host: "49983-sbx-abc.sandbox.example.com" }, "sbx-abc"],
    [{ host: "49983-sbx-abc.sandbox.example.com", "e2b-sandbox-id": "sbx-hdr" }, "sbx-hdr"],
    [{ host: "8080-sbx-abc.example.com" }, undefined],
    [{ host: "127.0.0.1:8080" }, undefined],
  ])("%j names %s", (headers, id) => {
    expect(sandboxIdFrom(headers)).toBe(id);
  });

  it.each([
    ["notes.txt", "/workspace/notes.txt"],
    ["~/a/../b", "/workspace/b"],
    ["/tmp//x/", "/tmp/x"],
    ["a b/'q'\n", "/workspace/a b/'q'\n"],
  ])("resolves %j to %j", (p, want) => {
    expect(resolveSandboxPath("path", p)).toBe(want);
  });

  it.each([
    ["", "send a path"],
    ["/a\0b", "NUL"],
  ])("refuses path %j", (p, msg) => {
    expect(() => resolveSandboxPath("path", p)).toThrow(msg);
  });

  it("maps E2B's users and refuses others", () => {
    expect(userFromAuthorization(`Basic ${Buffer.from("root:").toString("base64")}`)).toBe("root");
    expect(userFromAuthorization(undefined)).toBeUndefined();
    expect(() => validateUser("username", "user")).not.toThrow();
    expect(() => validateUser("username", "mallory")).toThrow('username: invalid value "mallory"');
    expect(() => userFromAuthorization("Bearer x")).toThrow("authorization");
  });
});
