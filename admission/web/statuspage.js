// tenantgate's status page: reads GET /status and GET /queue (same origin) every few seconds
// and draws them. Read-only: it sends nothing but those GETs. Every value from the server
// reaches the page through textContent or a CSSOM width, never through HTML parsing.
"use strict";

(function () {
  const PAGE_SIZE = 50;
  const DEFAULT_REFRESH_SECONDS = 5;
  const params = new URLSearchParams(window.location.search);
  const refreshSeconds = clamp(Number(params.get("refresh")) || DEFAULT_REFRESH_SECONDS, 1, 300);

  // What the page shows, kept in the URL's fragment so that a link reopens the same view.
  const state = readFragment();
  let paused = false;
  let timer = null;
  let generation = 0; // answers to an older request than the latest are dropped

  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- small DOM helpers

  function el(tag, options, children) {
    const node = document.createElement(tag);
    const opts = options || {};
    if (opts.className) node.className = opts.className;
    if (opts.text !== undefined && opts.text !== null) node.textContent = String(opts.text);
    if (opts.title) node.title = String(opts.title);
    if (opts.attrs) {
      for (const [name, value] of Object.entries(opts.attrs)) node.setAttribute(name, String(value));
    }
    for (const child of children || []) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function cell(text, className) {
    return el("td", { text: text, className: className });
  }

  function clamp(value, low, high) {
    return Math.min(Math.max(value, low), high);
  }

  function isObject(value) {
    return value !== null && typeof value === "object" && !Array.isArray(value);
  }

  // ---------------------------------------------------------------- quantities and times

  const SUFFIXES = {
    n: 1e-9, u: 1e-6, m: 1e-3, "": 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
    Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
  };

  // A Kubernetes quantity as a number, for bar widths only: the figures shown are the
  // server's exact strings.
  function quantity(text) {
    if (text === undefined || text === null) return 0;
    const match = /^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))$/.exec(String(text).trim());
    if (!match) return 0;
    const base = Number(match[1]);
    if (match[2]) return Number(match[1] + match[2]);
    const factor = SUFFIXES[match[3] || ""];
    return factor === undefined || Number.isNaN(base) ? 0 : base * factor;
  }

  function duration(seconds) {
    const s = Math.max(0, Math.floor(Number(seconds) || 0));
    if (s < 60) return `${s}s`;
    const minutes = Math.floor(s / 60);
    if (minutes < 60) return `${minutes}m${String(s % 60).padStart(2, "0")}s`;
    const hours = Math.floor(minutes / 60);
    if (hours < 48) return `${hours}h${String(minutes % 60).padStart(2, "0")}m`;
    return `${Math.floor(hours / 24)}d${String(hours % 24).padStart(2, "0")}h`;
  }

  function isoTime(unix) {
    if (typeof unix !== "number") return "";
    return new Date(unix * 1000).toISOString().replace(".000Z", "Z");
  }

  function ago(unix, now) {
    if (typeof unix !== "number") return "-";
    return `${duration(now - unix)} ago`;
  }

  // ---------------------------------------------------------------- state in the URL

  function readFragment() {
    const fragment = new URLSearchParams(window.location.hash.slice(1));
    return {
      q: fragment.get("q") || "",
      page: Math.max(0, Number.parseInt(fragment.get("page") || "0", 10) || 0),
      tenant: fragment.get("tenant") || "",
    };
  }

  function writeFragment() {
    const fragment = new URLSearchParams();
    if (state.q) fragment.set("q", state.q);
    if (state.page) fragment.set("page", String(state.page));
    if (state.tenant) fragment.set("tenant", state.tenant);
    const text = fragment.toString();
    history.replaceState(null, "", text ? `#${text}` : window.location.pathname + window.location.search);
  }

  // ---------------------------------------------------------------- fetching

  async function getJSON(url) {
    const response = await fetch(url, { cache: "no-store", headers: { Accept: "application/json" } });
    const body = await response.json().catch(() => null);
    if (!response.ok) {
      const reason = isObject(body) && body.error ? body.error : `HTTP ${response.status}`;
      throw new Error(`${url}: ${reason}`);
    }
    return body;
  }

  function statusURL() {
    const query = new URLSearchParams({
      offset: String(state.page * PAGE_SIZE),
      limit: String(PAGE_SIZE),
    });
    if (state.q) query.set("q", state.q);
    return `/status?${query}`;
  }

  async function refresh() {
    clearTimeout(timer);
    const mine = ++generation;
    try {
      const status = await getJSON(statusURL());
      let queue = null;
      if (state.tenant) {
        try {
          queue = await getJSON(`/queue?tenant=${encodeURIComponent(state.tenant)}`);
        } catch (error) {
          queue = { error: error.message };
        }
      }
      if (mine !== generation) return;
      render(status, queue);
      showError("");
    } catch (error) {
      if (mine !== generation) return;
      showError(`Could not refresh: ${error.message}`);
    } finally {
      if (mine === generation && !paused) timer = setTimeout(refresh, refreshSeconds * 1000);
    }
  }

  function showError(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = !message;
  }

  // ---------------------------------------------------------------- rendering

  function render(status, queue) {
    const now = typeof status.generatedAt === "number" ? status.generatedAt : Date.now() / 1000;
    renderHeader(status, now);
    renderTenants(status);
    renderQueue(status, queue);
    renderCohorts(status);
    renderRecent(status, now);
    renderReplica(status, now);
    document.body.dataset.generatedAt = String(now);
  }

  function renderHeader(status, now) {
    const replica = isObject(status.replica) ? status.replica : {};
    const role = $("role");
    role.textContent = replica.role ? replica.role : "";
    role.className = `badge ${replica.role === "leader" ? "leader" : ""}`;
    const readiness = isObject(status.readiness) ? status.readiness : null;
    const ready = $("ready");
    if (readiness) {
      ready.textContent = readiness.ready ? "ready" : "not ready";
      ready.className = `badge ${readiness.ready ? "ok" : "bad"}`;
    }
    $("mode").textContent = status.mode || "";
    $("updated").textContent = `updated ${isoTime(now)}${paused ? " (paused)" : ""}`;
  }

  function renderTenants(status) {
    const tenants = isObject(status.tenants) ? status.tenants : {};
    const rows = [];
    for (const [name, tenant] of Object.entries(tenants)) {
      rows.push(tenantRow(name, isObject(tenant) ? tenant : {}));
    }
    if (!rows.length) {
      rows.push(el("tr", {}, [el("td", { text: "No tenant matches.", attrs: { colspan: 5 } })]));
    }
    $("tenant-rows").replaceChildren(...rows);

    const page = isObject(status.page) ? status.page : null;
    const matched = page && typeof page.matched === "number" ? page.matched : rows.length;
    const total = page && typeof page.total === "number" ? page.total : matched;
    const first = matched ? state.page * PAGE_SIZE + 1 : 0;
    const last = Math.min((state.page + 1) * PAGE_SIZE, matched);
    const pages = Math.max(1, Math.ceil(matched / PAGE_SIZE));
    let info = `${first.toLocaleString("en")} to ${last.toLocaleString("en")} of ${matched.toLocaleString("en")}`;
    if (matched !== total) info += ` (of ${total.toLocaleString("en")} tenants)`;
    info += ` · page ${state.page + 1} of ${pages.toLocaleString("en")}`;
    $("page-info").textContent = info;
    $("prev").disabled = state.page <= 0;
    $("next").disabled = state.page + 1 >= pages;
    if (matched && state.page >= pages) {
      // The list shrank under the current page (search or config change): go to its end.
      state.page = pages - 1;
      writeFragment();
      refresh();
    }
  }

  function tenantRow(name, tenant) {
    const queue = isObject(tenant.queue) ? tenant.queue : {};
    const pending = typeof queue.pending === "number" ? queue.pending : 0;
    const select = el("button", {
      className: "link",
      text: name,
      title: `Show ${name}'s queue`,
      attrs: { type: "button", "data-tenant": name },
    });
    select.addEventListener("click", () => selectTenant(name));
    const row = el("tr", { attrs: { "data-tenant": name } }, [
      el("td", {}, [select]),
      el("td", {}, [bars(tenant)]),
      cell(tenant.pods ?? 0, "num pods"),
      cell(pending, "num pending"),
      cell(pending ? duration(queue.oldestWaitSeconds) : "-", "num oldest-wait"),
    ]);
    if (name === state.tenant) row.classList.add("selected");
    return row;
  }

  function bars(tenant) {
    const guaranteed = isObject(tenant.guaranteed) ? tenant.guaranteed : {};
    const ceiling = isObject(tenant.ceiling) ? tenant.ceiling : {};
    const used = isObject(tenant.used) ? tenant.used : {};
    const onGuaranteed = isObject(used.guaranteed) ? used.guaranteed : {};
    const onBurst = isObject(used.burst) ? used.burst : {};
    const resources = [...new Set([...Object.keys(guaranteed), ...Object.keys(ceiling)])].sort();
    const box = el("div", { className: "bars" });
    for (const resource of resources) {
      box.append(bar(resource, onGuaranteed[resource], onBurst[resource], guaranteed[resource], ceiling[resource]));
    }
    if (!resources.length) box.append(el("span", { className: "muted", text: "no limits" }));
    return box;
  }

  function bar(resource, usedG, usedB, guarantee, ceiling) {
    const g = quantity(usedG);
    const b = quantity(usedB);
    const limit = quantity(guarantee);
    const top = quantity(ceiling);
    const scale = Math.max(g + b, limit, top) || 1;
    const percent = (value) => `${clamp((value / scale) * 100, 0, 100)}%`;

    const usedGuaranteed = el("div", { className: "segment used-guaranteed" });
    usedGuaranteed.style.width = percent(g);
    const usedBurst = el("div", { className: "segment used-burst" });
    usedBurst.style.left = percent(g);
    usedBurst.style.width = percent(b);
    const track = el("div", { className: "track", attrs: { role: "img" } }, [usedGuaranteed, usedBurst]);
    if (guarantee !== undefined) {
      const mark = el("div", { className: "mark guarantee", title: `guarantee ${guarantee}` });
      mark.style.left = percent(limit);
      track.append(mark);
    }
    if (ceiling !== undefined) {
      const mark = el("div", { className: "mark ceiling", title: `ceiling ${ceiling}` });
      mark.style.left = percent(top);
      track.append(mark);
    }
    const over = ceiling !== undefined && g + b > top;
    const label = el("div", { className: "bar-label" }, [
      el("span", { className: "resource", text: resource }),
      "used ",
      el("span", { className: "used-guaranteed", text: usedG ?? "0" }),
      " on guaranteed + ",
      el("span", { className: "used-burst", text: usedB ?? "0" }),
      " on burst · guarantee ",
      el("span", { className: "guarantee", text: guarantee ?? "-" }),
      " · ceiling ",
      el("span", { className: "ceiling", text: ceiling ?? "-" }),
      over ? el("span", { className: "over", text: " over the ceiling" }) : null,
    ]);
    track.setAttribute("aria-label", label.textContent);
    return el("div", { className: "bar", attrs: { "data-resource": resource } }, [label, track]);
  }

  function selectTenant(name) {
    state.tenant = state.tenant === name ? "" : name;
    writeFragment();
    refresh();
  }

  function renderQueue(status, queue) {
    const section = $("queue-section");
    if (!state.tenant) {
      section.hidden = true;
      return;
    }
    section.hidden = false;
    $("queue-title").textContent = `Queue of ${state.tenant}`;
    const rows = [];
    let note = "";
    if (queue && queue.error) {
      note = queue.error;
    } else {
      const tenants = queue && isObject(queue.tenants) ? queue.tenants : {};
      const entry = isObject(tenants[state.tenant]) ? tenants[state.tenant] : { pods: [] };
      const pods = Array.isArray(entry.pods) ? entry.pods : [];
      for (const pod of pods) rows.push(queueRow(pod));
      note = `${pods.length} pod${pods.length === 1 ? "" : "s"} waiting behind the scheduling gate, first in line first.`;
      const replica = isObject(status.replica) ? status.replica : {};
      if (replica.role === "follower") {
        note += " This replica does not hold the controller lease, so it neither watches nor releases queued pods: the lease holder's page shows the live queue.";
      }
    }
    $("queue-note").textContent = note;
    if (!rows.length) {
      rows.push(el("tr", {}, [el("td", { text: "Nobody waiting.", attrs: { colspan: 6 } })]));
    }
    $("queue-rows").replaceChildren(...rows);
  }

  function queueRow(pod) {
    const priority = Number(pod.priority) || 0;
    const effective = Number(pod.effectivePriority) || 0;
    const boost = effective - priority;
    const shown = boost ? `${effective} (${priority} + ${boost} aging)` : String(effective);
    return el("tr", { attrs: { "data-pod": pod.pod } }, [
      cell(pod.position, "num position"),
      cell(pod.pod, "pod"),
      cell(shown, "num priority"),
      cell(pod.request, "request"),
      cell(duration(pod.waitedSeconds), "num waited"),
      cell(pod.releasing ? "releasing" : "waiting", "state"),
    ]);
  }

  // Cohorts, as /status serves them: {ROOT: {cohorts: [...], members: [...], capacity: {RES: QTY},
  // free: {RES: QTY}, borrowed: {TENANT: {RES: QTY}}, lent: {TENANT: {RES: QTY}},
  // shares: {TENANT: S}, fairShares: {TENANT: S}}}; nothing is drawn without them.
  function renderCohorts(status) {
    const cohorts = isObject(status.cohorts) ? status.cohorts : {};
    const names = Object.keys(cohorts).sort();
    $("cohorts-section").hidden = names.length === 0;
    const boxes = names.map((name) => cohortBox(name, isObject(cohorts[name]) ? cohorts[name] : {}));
    $("cohorts").replaceChildren(...boxes);
  }

  function amounts(value) {
    if (!isObject(value)) return "-";
    const keys = Object.keys(value).sort();
    return keys.length ? keys.map((key) => `${key} ${value[key]}`).join(", ") : "-";
  }

  function cohortBox(name, cohort) {
    const list = (key) => (Array.isArray(cohort[key]) ? cohort[key].map(String) : []);
    const members = list("members");
    const nested = list("cohorts").filter((child) => child !== name);
    const part = (key) => (isObject(cohort[key]) ? cohort[key] : {});
    const capacity = part("capacity");
    const free = part("free");
    const resources = [...new Set([...Object.keys(capacity), ...Object.keys(free)])].sort();
    const room = el("table", { className: "cohort-room" }, [
      el("thead", {}, [el("tr", {}, ["Resource", "capacity", "free to lend"].map((t) => el("th", { text: t })))]),
      el(
        "tbody",
        {},
        resources.map((resource) =>
          el("tr", { attrs: { "data-resource": resource } }, [
            cell(resource),
            cell(capacity[resource] === undefined ? "-" : capacity[resource], "num"),
            cell(free[resource] === undefined ? "-" : free[resource], "num"),
          ]),
        ),
      ),
    ]);
    const share = (key, member) => {
      const value = part(key)[member];
      return typeof value === "number" ? value.toFixed(2) : "-";
    };
    const people = el("table", { className: "cohort-members" }, [
      el("thead", {}, [
        el("tr", {}, ["Tenant", "borrowed", "lent", "share", "fair share"].map((t) => el("th", { text: t }))),
      ]),
      el(
        "tbody",
        {},
        members.map((member) =>
          el("tr", { attrs: { "data-member": member } }, [
            cell(member),
            cell(amounts(part("borrowed")[member])),
            cell(amounts(part("lent")[member])),
            cell(share("shares", member), "num"),
            cell(share("fairShares", member), "num"),
          ]),
        ),
      ),
    ]);
    return el("div", { className: "cohort", attrs: { "data-cohort": name } }, [
      el("h3", { text: name }),
      members.length ? el("p", { text: `Tenants: ${members.join(", ")}` }) : null,
      nested.length ? el("p", { className: "muted", text: `Cohorts: ${nested.join(", ")}` }) : null,
      resources.length ? room : null,
      members.length ? people : null,
    ]);
  }

  function renderRecent(status, now) {
    const recent = isObject(status.recent) ? status.recent : {};
    const denials = Array.isArray(recent.denials) ? recent.denials : [];
    const releases = Array.isArray(recent.releases) ? recent.releases : [];
    const denialRows = denials.map((entry) =>
      el("tr", {}, [
        el("td", { text: ago(entry.at, now), title: isoTime(entry.at) }),
        cell(entry.tenant || "-"),
        cell(entry.pod),
        cell(entry.reason),
        cell(entry.message, "message"),
      ]),
    );
    const releaseRows = releases.map((entry) =>
      el("tr", {}, [
        el("td", { text: ago(entry.at, now), title: isoTime(entry.at) }),
        cell(entry.tenant),
        cell(entry.pod),
        cell(entry.outcome),
        cell(duration(entry.waitedSeconds), "num"),
        cell(entry.message, "message"),
      ]),
    );
    if (!denialRows.length) denialRows.push(emptyRow(5, "No denial since this replica started."));
    if (!releaseRows.length) releaseRows.push(emptyRow(6, "No release since this replica started."));
    $("denial-rows").replaceChildren(...denialRows);
    $("release-rows").replaceChildren(...releaseRows);
  }

  function emptyRow(columns, text) {
    return el("tr", {}, [el("td", { className: "muted", text: text, attrs: { colspan: columns } })]);
  }

  function renderReplica(status, now) {
    const replica = isObject(status.replica) ? status.replica : {};
    const config = isObject(status.config) ? status.config : {};
    const certificate = isObject(status.certificate) ? status.certificate : null;
    const facts = [];
    const fact = (term, value, className) => {
      facts.push(el("dt", { text: term }), el("dd", { text: value, className: className }));
    };
    let role = replica.role || "-";
    if (replica.election) {
      role += `; controller lease held by ${replica.holder || "nobody yet"}`;
    } else if (replica.role) {
      role += " (no leader election: this replica does all the work)";
    }
    fact("Role", role, "role");
    if (replica.identity) fact("Identity", replica.identity);
    fact("Version", status.version || "-");
    if (certificate && typeof certificate.notAfter === "number") {
      const left = certificate.notAfter - now;
      const text = left > 0
        ? `expires ${isoTime(certificate.notAfter)} (in ${duration(left)})`
        : `EXPIRED ${isoTime(certificate.notAfter)}`;
      fact("Serving certificate", text, left < 7 * 86400 ? "warn certificate" : "certificate");
    } else {
      fact("Serving certificate", "not reported yet", "certificate");
    }
    fact("Cluster", status.cluster ? `${status.mode}: ${status.cluster}` : String(status.mode || "-"));
    fact("Ledger synced", status.synced ? "yes" : "no", status.synced ? "" : "warn");
    if (typeof status.pods === "number") fact("Pods watched", status.pods.toLocaleString("en"));
    fact("Last recount", typeof status.lastRecount === "number" ? ago(status.lastRecount, now) : "never");
    fact("Config", `${config.file || "-"}${config.watched ? " (watched)" : " (embedded)"}`);
    if (typeof config.tenants === "number") fact("Tenants", config.tenants.toLocaleString("en"));
    if (config.reloadError) fact("Config reload", `rejected: ${config.reloadError}`, "warn");
    const missing = Array.isArray(config.missingPriorityClasses) ? config.missingPriorityClasses : [];
    if (missing.length) fact("Missing priority classes", missing.join(", "), "warn");
    if (config.globalDefaultPriorityClass) fact("Default priority class", config.globalDefaultPriorityClass);
    const releases = isObject(status.queue) ? status.queue : {};
    const givenUp = isObject(releases.givenUp) ? Object.keys(releases.givenUp) : [];
    if (givenUp.length) fact("Pods given up on", givenUp.join(", "), "warn");
    const stuck = isObject(releases.releasedUnschedulable) ? Object.keys(releases.releasedUnschedulable) : [];
    if (stuck.length) fact("Released, unschedulable", stuck.join(", "), "warn");
    $("replica-facts").replaceChildren(...facts);

    const checks = isObject(status.readiness) && isObject(status.readiness.checks) ? status.readiness.checks : {};
    const rows = Object.keys(checks).sort().map((name) => {
      const check = isObject(checks[name]) ? checks[name] : {};
      return el("tr", { attrs: { "data-check": name } }, [
        cell(name),
        cell(check.ok ? "ok" : "failing", check.ok ? "state-ok" : "state-bad"),
        cell(check.detail, "message"),
      ]);
    });
    $("check-rows").replaceChildren(...rows);
  }

  // ---------------------------------------------------------------- controls

  function start() {
    const search = $("search");
    search.value = state.q;
    let debounce = null;
    search.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        state.q = search.value.trim();
        state.page = 0;
        writeFragment();
        refresh();
      }, 250);
    });
    $("prev").addEventListener("click", () => {
      state.page = Math.max(0, state.page - 1);
      writeFragment();
      refresh();
    });
    $("next").addEventListener("click", () => {
      state.page += 1;
      writeFragment();
      refresh();
    });
    $("pause").addEventListener("click", () => {
      paused = !paused;
      $("pause").textContent = paused ? "Resume" : "Pause";
      if (paused) clearTimeout(timer);
      else refresh();
    });
    window.addEventListener("hashchange", () => {
      Object.assign(state, readFragment());
      search.value = state.q;
      refresh();
    });
    refresh();
  }

  start();
})();
