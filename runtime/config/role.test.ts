// The process role: from the argument the Deployment passes, or SBX_ROLE; argv wins a conflict;
// a bad value in either names the field, the value and the allowed roles.
import { describe, expect, it } from "vitest";
import { planRole, resolveRole, validateRoleForPlatform } from "./role.ts";

describe("resolveRole", () => {
  it.each([
    [[], {}, { role: "all", source: "default" }],
    [[], { SBX_ROLE: "" }, { role: "all", source: "default" }],
    [["controller"], {}, { role: "controller", source: "argv" }],
    [[], { SBX_ROLE: "manager" }, { role: "manager", source: "SBX_ROLE" }],
    [["manager"], { SBX_ROLE: "manager" }, { role: "manager", source: "argv" }],
    [["controller"], { SBX_ROLE: "manager" }, { role: "controller", source: "argv", overridden: "SBX_ROLE=manager" }],
    [["all"], { SBX_ROLE: "controller" }, { role: "all", source: "argv", overridden: "SBX_ROLE=controller" }],
  ])("argv %j env %j -> %j", (argv, env, want) => {
    expect(resolveRole(argv, env)).toEqual(want);
  });

  it.each([
    [["controler"], {}, 'role argument: invalid value "controler": use one of: all, manager, controller'],
    [[], { SBX_ROLE: "Manager" }, 'SBX_ROLE: invalid value "Manager": use one of: all, manager, controller'],
    // the losing setting is checked too: a typo must not hide behind the argument
    [["manager"], { SBX_ROLE: "contoller" }, 'SBX_ROLE: invalid value "contoller"'],
    [["manager", "extra"], {}, 'argv: invalid value "manager extra": pass at most one argument, the role'],
  ])("argv %j env %j is refused: %s", (argv, env, message) => {
    expect(() => resolveRole(argv, env)).toThrow(message);
  });
});

describe("planRole", () => {
  it("splits the work: the API in manager and all, the Lease and the reaper in controller and all", () => {
    expect(planRole("manager")).toEqual({
      api: true,
      leaderElection: false,
      reaps: false,
      maintenance: false,
      reconcilesOwn: true,
    });
    expect(planRole("controller")).toMatchObject({ api: false, leaderElection: true, reaps: true, maintenance: true });
    expect(planRole("all")).toMatchObject({ api: true, leaderElection: true, reaps: true, maintenance: true });
  });
});

describe("validateRoleForPlatform", () => {
  it("refuses a split role on the local platform, naming the fix", () => {
    expect(() => validateRoleForPlatform("controller", "local")).toThrow(
      'role: invalid value "controller": the local platform runs in one process: use role all',
    );
    expect(() => validateRoleForPlatform("all", "local")).not.toThrow();
    expect(() => validateRoleForPlatform("manager", "kubernetes")).not.toThrow();
  });
});
