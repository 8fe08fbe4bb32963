// A JWT's team claim is the team a create counts against (docs/tenancy.md, docs/identity.md):
// over the real service on the real local backend with a real issuer, two owners whose tokens
// name team ml share its limit though neither is a configured member; the team is stamped on the
// sandbox under a key no caller may set or see; GET /v1/usage answers for the token's team; a
// token naming a team config does not define is a 401 naming the check; the E2B layer's
// X-API-KEY counts the same way.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TEAM_METADATA_KEY } from "../../runtime/config/tenancy.ts";
import { TestIssuer } from "../auth/issuer-server.ts";
import { type AuthApp, issuerEntry, startAuthApp } from "../auth/support.ts";
import { auth } from "../support/local.ts";

let issuer: TestIssuer;
let t: AuthApp;

beforeAll(async () => {
  issuer = await new TestIssuer().start();
  t = await startAuthApp(
    [issuerEntry("corp", issuer.url, { team: { claim: "groups", stripPrefix: "sbx-team-" } })],
    {},
    {
      budget: { cpu: "4", memory: "8Gi" },
      tenancy: {
        teams: [
          { name: "ml", limits: { sandboxes: 1 } },
          // alice is a configured member of web; a token naming ml still counts against ml
          { name: "web", members: ["alice"], limits: { sandboxes: 5 } },
        ],
      },
    },
  );
});
afterAll(async () => {
  await t?.close();
  await issuer?.close();
});

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const ml = (sub: string) => issuer.token({ sub, groups: ["staff", "sbx-team-ml"] });
const create = (headers: Record<string, string>, payload: Record<string, unknown> = {}) =>
  t.app.inject({ method: "POST", url: "/v1/sandboxes", headers, payload });

describe("a JWT's team claim and quotas", () => {
  let danaId = "";

  it("two owners whose tokens name ml share ml's limit of one live sandbox", async () => {
    const first = await create(bearer(ml("dana")));
    expect(first.statusCode, first.body).toBe(201);
    danaId = first.json().id;
    const other = await create(bearer(ml("frank")));
    expect(other.statusCode, other.body).toBe(429);
    expect(other.json().error).toMatchObject({ details: { reason: "team_quota", team: "ml", short: ["sandboxes"] } });
    // the claim wins over membership: alice, a member of web, creates as ml with such a token
    const alice = await create(bearer(ml("alice")));
    expect(alice.statusCode, alice.body).toBe(429);
    expect(alice.json().error.details.team).toBe("ml");
    // and with her static token (no claim) she is in web, which has room
    const asWeb = await create(auth("alice"));
    expect(asWeb.statusCode, asWeb.body).toBe(201);
  });

  it("stamps the team on the sandbox, where no caller sees it", async () => {
    const got = await t.app.inject({ method: "GET", url: `/v1/sandboxes/${danaId}`, headers: bearer(ml("dana")) });
    expect(got.statusCode).toBe(200);
    expect(Object.keys(got.json().metadata)).not.toContain(TEAM_METADATA_KEY);
    const inside = await t.rt.manager.get("dana", danaId);
    expect(inside.metadata[TEAM_METADATA_KEY]).toBe("ml");
  });

  it("GET /v1/usage answers for the token's team", async () => {
    const r = await t.app.inject({ method: "GET", url: "/v1/usage", headers: bearer(ml("frank")) });
    expect(r.statusCode, r.body).toBe(200);
    expect(r.json().team).toBe("ml");
    expect(r.json().teams).toHaveLength(1);
    expect(r.json().teams[0]).toMatchObject({ team: "ml", live: { sandboxes: 1 } });
  });

  it("a caller cannot set the team key itself, on create or update", async () => {
    const made = await create(auth("bob"), { metadata: { [TEAM_METADATA_KEY]: "web" } });
    expect(made.statusCode).toBe(400);
    expect(made.json().error.message).toContain(`metadata.${TEAM_METADATA_KEY}`);
    const patched = await t.app.inject({
      method: "PATCH",
      url: `/v1/sandboxes/${danaId}`,
      headers: bearer(ml("dana")),
      payload: { metadata: { [TEAM_METADATA_KEY]: "web" } },
    });
    expect(patched.statusCode, patched.body).toBe(400);
  });

  it("a token naming a team config does not define is refused, naming the check and the team", async () => {
    const token = issuer.token({ sub: "dana", groups: ["sbx-team-nope"] });
    const r = await create(bearer(token));
    expect(r.statusCode).toBe(401);
    expect(r.json().error.message).toContain("unknown_team");
    expect(r.json().error.message).toContain('"nope"');
    expect(r.body).not.toContain(token);
  });

  it("once ml's sandbox is gone, another ml token may create", async () => {
    const del = await t.app.inject({ method: "DELETE", url: `/v1/sandboxes/${danaId}`, headers: bearer(ml("dana")) });
    expect(del.statusCode).toBeLessThan(300);
    const again = await create(bearer(ml("frank")));
    expect(again.statusCode, again.body).toBe(201);
  });

  it("the E2B layer's X-API-KEY counts against the token's team too", async () => {
    // ml holds frank's sandbox from the case above: gina's E2B create is ml's second
    const r = await t.app.inject({
      method: "POST",
      url: "/v2/sandboxes",
      headers: { "x-api-key": ml("gina") },
      payload: { templateID: "base" },
    });
    expect(r.statusCode, r.body).toBe(429);
    expect(r.body).toContain("team ml");
  });
});
