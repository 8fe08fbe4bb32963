// CONTRIBUTING's naming rule for runtime/ as a test: one case for file names, camelCase
// (`sandboxIndex.ts`, `recordWriter.test.ts`), so a module's name is the same word in an import,
// a stack trace and a search. Generated code (runtime/server/e2b/envd/gen) keeps its generator's names.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** true when a file's name before its extensions is camelCase: lower-case first, no separators */
function isCamelCaseName(fileName: string): boolean {
  const stem = fileName.split(".")[0] ?? "";
  return /^[a-z][a-zA-Z0-9]*$/.test(stem);
}

describe("file names under runtime/", () => {
  it.each([
    ["sandboxIndex.ts", true],
    ["recordWriter.test.ts", true],
    ["main.ts", true],
    ["process-service.ts", false],
    ["Process.ts", false],
    ["snake_case.ts", false],
  ])("%s is camelCase: %s", (name, expected) => {
    expect(isCamelCaseName(name)).toBe(expected);
  });

  it("are all camelCase (rename with git mv and update the imports)", () => {
    const files = execFileSync("git", ["ls-files", "runtime"], { cwd: ROOT, encoding: "utf8" })
      .split("\n")
      .filter((f) => /\.(ts|mts|mjs)$/.test(f) && !f.startsWith("runtime/server/e2b/envd/gen/"));
    expect(files.length).toBeGreaterThan(100);
    const offenders = files.filter((f) => !isCamelCaseName(f.slice(f.lastIndexOf("/") + 1)));
    expect(offenders).toEqual([]);
  });
});
