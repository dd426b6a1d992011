// The review console's page logic. Every text that comes from an item, a record or the API is
// put into the page with textContent (through el()); nothing is parsed as HTML.

import { PICKER_MIN_OPTIONS, pickerBlock, pickerFilter } from "./picker.js";

const $ = (id) => document.getElementById(id);
const TOKEN = "decision-router.id-token";
// One row of keys per question: the first question's options answer to 1 2 3 …, the next to q w e …
const KEY_ROWS = ["1234567890", "qwertyuiop", "asdfghjkl", "zxcvbnm"];
const VIEWS = ["sign-in", "reviews", "item", "routes", "export"];

let config = null;
let current = null; // the item on the page: {task, execution_name, questions, keys: Map(key -> input)}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(view) {
  for (const name of VIEWS) $(`view-${name}`).hidden = name !== view;
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.classList.toggle("current", link.dataset.nav === view || (view === "item" && link.dataset.nav === "reviews"));
  }
}

function say(text) {
  $("message").textContent = text || "";
  $("message").hidden = !text;
}

// ------------------------------------------------------------------ API
class SignInNeeded extends Error {}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN);
  if (!token) throw new SignInNeeded("sign in first");
  const headers = { Authorization: `Bearer ${token}`, ...(options.body ? { "Content-Type": "application/json" } : {}) };
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN);
    throw new SignInNeeded("your sign-in has expired or is not valid: sign in again");
  }
  if (options.raw && response.ok) return response;
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || data.message || `${response.status} ${response.statusText}`);
  return data;
}

// ------------------------------------------------------------------ sign-in
async function cognito(target, body) {
  const response = await fetch(`https://cognito-idp.${config.region}.amazonaws.com/`, {
    method: "POST",
    headers: { "Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": `AWSCognitoIdentityProviderService.${target}` },
    body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.message || data.__type || "sign-in failed");
  return data;
}

// A challenge Cognito answered the sign-in with: a first sign-in's new password, or the code of the
// reviewer's authenticator app (ReviewerMfa); {name, session}.
let challenge = null;

function awaitsChallenge(data) {
  if (data.ChallengeName === "NEW_PASSWORD_REQUIRED" || data.ChallengeName === "SOFTWARE_TOKEN_MFA") {
    challenge = { name: data.ChallengeName, session: data.Session };
    const code = data.ChallengeName === "SOFTWARE_TOKEN_MFA";
    $("new-password-label").hidden = code;
    $("mfa-code-label").hidden = !code;
    say(code ? "Enter the code your authenticator app shows." : "Choose a new password to finish your first sign-in.");
    return true;
  }
  if (!data.AuthenticationResult) throw new Error(`sign-in needs ${data.ChallengeName}, which this page does not support`);
  return false;
}

async function signIn(event) {
  event.preventDefault();
  say("");
  const username = $("username").value.trim();
  try {
    let token;
    if (config.sign_in === "local") {
      // The local run's stand-in for Cognito (make review): it signs a token for any name.
      const response = await fetch("/local/sign-in", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ username }),
      });
      const data = await response.json();
      if (!response.ok) throw new Error(data.error || "sign-in failed");
      token = data.id_token;
    } else {
      const data = challenge
        ? await cognito("RespondToAuthChallenge", {
          ChallengeName: challenge.name, ClientId: config.client_id, Session: challenge.session,
          ChallengeResponses: challenge.name === "SOFTWARE_TOKEN_MFA"
            ? { USERNAME: username, SOFTWARE_TOKEN_MFA_CODE: $("mfa-code").value.trim() }
            : { USERNAME: username, NEW_PASSWORD: $("new-password").value },
        })
        : await cognito("InitiateAuth", {
          AuthFlow: "USER_PASSWORD_AUTH", ClientId: config.client_id,
          AuthParameters: { USERNAME: username, PASSWORD: $("password").value },
        });
      if (awaitsChallenge(data)) return;
      token = data.AuthenticationResult.IdToken;
    }
    challenge = null;
    $("mfa-code-label").hidden = true;
    sessionStorage.setItem(TOKEN, token);
    location.hash = location.hash && location.hash !== "#/sign-in" ? location.hash : "#/reviews";
    await route();
  } catch (error) {
    say(error.message);
  }
}

function signOut() {
  sessionStorage.removeItem(TOKEN);
  location.hash = "#/sign-in";
}

function showSignIn(reason) {
  show("sign-in");
  $("nav").hidden = true;
  $("who").hidden = true;
  const local = config.sign_in === "local";
  $("password-label").hidden = local;
  $("sign-in-hint").textContent = local
    ? "Local run: any name signs you in as a reviewer (no AWS account involved)."
    : `Reviewers are the users of the stack's user pool in the group "${config.group}".`;
  if (reason) say(reason);
  $("username").focus();
}

// ------------------------------------------------------------------ formatting
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "?";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

const percent = (p) => (p === null || p === undefined ? "–" : `${(100 * p).toFixed(1)}%`);

function answersText(answers, withheld = []) {
  return Object.entries(answers || {}).map(([q, o]) => `${q}=${withheld.includes(q) ? "(hidden: a check)" : o ?? "?"}`).join(", ");
}

// A sampled check: the router would have routed it alone; the reviewer's answer measures it.
function checkBadge(questions) {
  if (!questions || !questions.length) return null;
  return el("span", { class: "badge check", "data-check": questions.join(" "),
    title: `Sampled to measure the automatic answers' precision (${questions.join(", ")}): answer as for any review.` },
  "check of an automatic answer");
}

// ------------------------------------------------------------------ pending list
const RISK_WORDS = { breached: "past due", at_risk: "at risk", on_track: "on track" };

// The time-to-first-review clock (the policy's review_sla): the list is ordered by it. A check's
// priority is not named when it is the automatic answer the check measures.
function slaCell(sla, withheld = []) {
  if (!sla) return el("td", { class: "sla", "data-risk": "" }, "no target");
  const left = sla.time_left_seconds;
  const text = left <= 0 ? `${duration(-left)} past due` : `${duration(left)} left`;
  return el("td", { class: `sla ${sla.risk}`, "data-risk": sla.risk,
    title: `${RISK_WORDS[sla.risk]}: first review within ${sla.target_minutes} min${sla.priority ? ` (${sla.priority})` : ""}` },
  text, el("div", { class: "id" }, `${sla.priority ?? (withheld.length ? "priority hidden" : "default")} · ${sla.target_minutes}m target`));
}

async function showReviews() {
  show("reviews");
  const kind = $("filter-kind").value;
  const question = $("filter-question").value;
  const query = new URLSearchParams({ ...(kind && { kind }), ...(question && { question }) });
  const data = await api(`/api/reviews?${query}`);
  fillSelect($("filter-kind"), data.kinds, kind);
  fillSelect($("filter-question"), data.questions, question);
  const rows = data.reviews.map((r) => {
    const share = r.age_seconds === null ? 0 : r.age_seconds / r.timeout_seconds;
    const state = share >= 1 ? "overdue" : share >= 0.75 ? "late" : "";
    return el("tr", { "data-name": r.execution_name, onclick: () => { location.hash = `#/review/${r.execution_name}`; } },
      el("td", {}, el("a", { href: `#/review/${r.execution_name}` }, r.headline || r.item_id),
        el("div", { class: "id" }, `${r.item_kind} ${r.item_id}`)),
      el("td", { class: "reason" }, checkBadge(r.check), r.reason),
      el("td", {}, answersText(r.suggested, r.withheld)),
      el("td", { class: "age" }, `${duration(r.age_seconds)} of ${duration(r.timeout_seconds)}`,
        el("div", { class: `meter ${state}` }, el("span", { style: null, "data-share": Math.min(1, share).toFixed(3) }))),
      slaCell(r.sla, r.withheld));
  });
  $("review-rows").replaceChildren(...rows);
  for (const bar of $("review-rows").querySelectorAll("[data-share]")) bar.style.width = `${100 * Number(bar.dataset.share)}%`;
  $("reviews-empty").hidden = rows.length > 0;
  const notes = [];
  if (data.malformed) notes.push(`${data.malformed} pending review(s) could not be read and are not shown (see the console's logs).`);
  if (notes.length) say(notes.join(" "));
}

function fillSelect(select, values, chosen) {
  const first = select.options[0];
  select.replaceChildren(first, ...values.map((v) => el("option", { value: v, selected: v === chosen }, v)));
}

// ------------------------------------------------------------------ one item
function fieldRows(item, prefix = "") {
  const rows = [];
  for (const [name, value] of Object.entries(item)) {
    if (value !== null && typeof value === "object") rows.push(...fieldRows(value, `${prefix}${name}.`));
    else rows.push(el("dt", {}, `${prefix}${name}`), el("dd", {}, value === null ? "–" : String(value)));
  }
  return rows;
}

function questionBlock(question, index, keys) {
  const row = KEY_ROWS[index] || "";
  const meta = [];
  if (question.source === "rule") meta.push(`rule ${question.rule} fired${question.rule_description ? `: ${question.rule_description}` : ""}`);
  else if (question.source === "endpoint_error") meta.push(`no model answer (${question.error || "endpoint error"})`);
  else if (question.source === "model" && !question.blind) {
    meta.push(`decided by the ${question.readout === "head" ? "learned head" : "option letters"}`);
    if (question.confidence !== null) meta.push(`confidence ${question.confidence.toFixed(2)} (needs ${question.min_confidence.toFixed(2)})`);
    if (question.head_skipped) meta.push(`head not used: ${question.head_skipped}`);
  }
  // A sampled check is blind: the API sends nothing of the automatic answer, and nothing is preselected.
  if (question.blind) meta.push("a check: the automatic answer is hidden until you answer; choose what you would");
  const qmeta = el("div", {}, el("p", { class: "qmeta" }, question.passed || question.blind ? "" : el("span", { class: "doubt" }, "in doubt · "), meta.join(" · ")),
    whyBlock(question));
  if (question.options.length >= PICKER_MIN_OPTIONS) {
    return pickerBlock(question, `${question.id}: ${question.question}`, qmeta, nextAfter);
  }
  const options = question.options.map((option, i) => {
    const key = row[i] || "";
    const input = el("input", { type: "radio", name: `q-${question.id}`, value: option.id,
      checked: !question.blind && option.id === question.suggested, "data-question": question.id });
    if (key) keys.set(key, input);
    // The model's letters are shown only where they decided: a head's answer shows the head's figure alone.
    const byHead = question.readout === "head" && option.head !== null && option.head !== undefined;
    const probability = option.probability ?? (byHead ? option.head : option.letters);
    const probs = el("span", { class: "probs" },
      byHead
        ? el("span", { title: "learned head" }, `head ${percent(option.head)}`)
        : el("span", { title: "option letters" }, percent(probability)),
      el("div", { class: "pbar", "data-width": probability ?? 0 }));
    return el("label", { class: "option" }, el("kbd", {}, key), input,
      el("span", { class: "what" }, el("b", {}, option.id),
        !question.blind && option.id === question.suggested ? el("span", { class: "suggested" }, "suggested") : null,
        el("small", {}, option.description, option.target ? ` → ${option.target}` : "", option.escalate ? " (escalates)" : "")),
      probs);
  });
  return el("fieldset", {}, el("legend", {}, `${question.id}: ${question.question}`), qmeta, options);
}

// The decision's reason: its one line, and in full on request (the rules, the thresholds compared,
// the words and evidence fields that moved a head's answer, the noise controls an incident met).
function whyBlock(question) {
  const why = question.why_detail;
  if (!why) return null;
  const rows = [];
  const add = (name, value) => rows.push(el("dt", {}, name), el("dd", {}, value));
  add("readout", `${why.readout || "none"} → ${why.option || "–"}`);
  if (why.rules.length) add("rules", why.rules.map((r) => `${r.rule}: ${r.fired ? "fired" : r.matched ? "matched" : "no match"}`).join("; "));
  for (const check of why.checks) {
    add(check.name, `${check.value.toFixed(3)} ${check.passed ? "≥" : "<"} ${check.threshold.toFixed(3)}`);
  }
  if (why.words && why.words.length) add("words", why.words.map((w) => `"${w}"`).join(", "));
  if (why.fields) {
    add("fields", why.fields.map((f) => `${f.field} ${f.effect >= 0 ? "+" : ""}${f.effect.toFixed(3)} (without it ${f.without.toFixed(3)})`).join("; "));
  } else if (why.fields_note) add("fields", why.fields_note);
  if (why.noise) {
    add("noise", Object.entries(why.noise).filter(([, v]) => v !== null).map(([k, v]) => `${k} ${v}`).join("; ") || "none applied");
  }
  return el("details", { class: "why", "data-why": question.id },
    el("summary", {}, `why: ${question.why}`), el("dl", {}, rows));
}

// After a many-option question's picker chose: on to the next question's picker, else to Submit.
function nextAfter(question) {
  const later = current.questions.slice(current.questions.findIndex((q) => q.id === question.id) + 1);
  const next = later.map((q) => pickerFilter($("questions"), q.id)).find(Boolean);
  (next || $("submit")).focus({ preventScroll: true });
}

// Duplicates linked: a ticket's incident (and the team its answered review suggests: shown, never
// applied), or an incident's linked tickets.
function linkBlocks(data) {
  const blocks = [];
  if (data.linked) {
    blocks.push(el("p", { class: "linked", "data-linked": data.linked.incident_id }, data.linked.line));
    const offered = data.linked.suggestion;
    if (offered) blocks.push(el("p", { class: "suggestion", "data-suggested": offered.team }, offered.line));
  }
  if (data.linked_tickets && data.linked_tickets.length) {
    blocks.push(el("p", { class: "linked" }, `Tickets linked to this incident (${data.linked_tickets.length}):`),
      el("ul", { class: "linked-tickets" },
        data.linked_tickets.map((t) => el("li", { "data-linked-ticket": t.item_id }, `${t.item_id}: ${t.state}`))));
  }
  if (data.links_error) blocks.push(el("p", { class: "linked" }, data.links_error));
  return blocks;
}

// A resolved item like this one: what it said, where it went, who decided and when, how alike.
function similarRow(s) {
  const who = s.by === "router" ? "routed by the router" : `answered by ${s.resolved_by}`;
  return el("li", { "data-similar": s.item_id },
    el("div", { class: "id" }, `${s.item_kind} ${s.item_id} · ${percent(s.similarity)} alike`),
    el("p", { class: "summary" }, s.summary),
    el("p", { class: "resolution" }, `${s.target ? `→ ${s.target}` : ""} (${answersText(s.answers)}), ${who}, ${s.resolved_at.slice(0, 16).replace("T", " ")}`));
}

// While an item loads (its similar items and links take the API seconds), the page says so and
// shows nothing of the item it showed before.
function loading(busy) {
  $("view-item").setAttribute("aria-busy", busy ? "true" : "false");
  $("item-loading").hidden = !busy;
  for (const part of $("view-item").querySelectorAll(".heading, #item-reason, #item-links, .columns")) part.hidden = busy;
}

// Focus the first thing to answer without scrolling to it: the item's title stays in view.
function focusAnswer(target) {
  target.focus({ preventScroll: true });
  $("item-title").scrollIntoView({ block: "nearest" });
}

async function showItem(task, name) {
  show("item");
  $("outcome").hidden = true;
  $("item-title").textContent = "";
  current = null; // no key answers the item shown before while this one loads
  loading(true);
  let data;
  try {
    data = await api(task === "review" ? `/api/reviews/${encodeURIComponent(name)}` : `/api/routes/${encodeURIComponent(name)}`);
  } finally {
    loading(false);
  }
  $("back").href = task === "review" ? "#/reviews" : "#/routes";
  $("item-title").textContent = data.headline || data.item_id;
  $("item-kind").textContent = `${data.item_kind} ${data.item_id} · ${data.policy} v${data.policy_version}`;
  $("item-reason").replaceChildren(checkBadge(data.check), task === "review"
    ? `In review because ${data.reason}` : `Routed automatically to ${data.target} (${data.reason}). Give the right answer:`);
  $("item-links").replaceChildren(...linkBlocks(data));
  $("answer-heading").textContent = task === "review" ? "Your answer" : "The right answer";
  $("item-fields").replaceChildren(...fieldRows(data.item));
  const similar = data.similar || [];
  $("item-similar").replaceChildren(...similar.map(similarRow));
  $("similar-empty").hidden = similar.length > 0;
  const keys = new Map();
  $("questions").replaceChildren(...data.questions.map((q, i) => questionBlock(q, i, keys)));
  for (const bar of $("questions").querySelectorAll("[data-width]")) bar.style.width = `${100 * Number(bar.dataset.width)}%`;
  $("note").value = "";
  $("submit").disabled = false;
  current = { task, name, item_id: data.item_id, questions: data.questions, keys };
  // A question with many options starts with its picker's filter box; otherwise the keys answer.
  const picker = data.questions.map((q) => pickerFilter($("questions"), q.id)).find(Boolean);
  window.scrollTo(0, 0);
  focusAnswer(picker || $("submit"));
}

async function submitAnswer(event) {
  event.preventDefault();
  if (!current || $("submit").disabled) return;
  const answers = {};
  for (const question of current.questions) {
    const chosen = document.querySelector(`input[name="q-${CSS.escape(question.id)}"]:checked`);
    if (!chosen) { say(`Choose an answer for ${question.id}.`); return; }
    answers[question.id] = chosen.value;
  }
  say("");
  $("submit").disabled = true;
  const path = current.task === "review" ? `/api/reviews/${encodeURIComponent(current.name)}`
    : `/api/routes/${encodeURIComponent(current.name)}/correction`;
  try {
    const result = await api(path, { method: "POST", body: JSON.stringify({ answers, note: $("note").value }) });
    const verb = current.task === "review" ? "Answered" : "Corrected";
    showOutcome(`${verb} as ${result.reviewer}: ${answersText(result.answers)}. The workflow is delivering it to ${result.target}${result.escalate ? " and paging the on-call" : ""}…`);
    await followExecution(result.execution_name, verb, result);
  } catch (error) {
    $("submit").disabled = false;
    if (error instanceof SignInNeeded) return showSignIn(error.message);
    say(error.message);
  }
}

function showOutcome(text) {
  $("outcome").textContent = text;
  $("outcome").hidden = false;
}

async function followExecution(name, verb, result) {
  for (let i = 0; i < 40; i += 1) {
    const state = await api(`/api/executions/${encodeURIComponent(name)}`);
    if (state.outcome) {
      showOutcome(`${verb} as ${state.reviewer || result.reviewer}. Delivered to ${state.target}` +
        `${state.escalated ? " and escalated" : ""}; audited as "${state.outcome}" (execution ${state.status.toLowerCase()}).`);
      $("outcome").dataset.target = state.target || "";
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

function onKey(event) {
  if ($("view-item").hidden || !current) return;
  if (event.target instanceof HTMLTextAreaElement) return; // typing a note
  // The picker's own keys (Esc on its empty filter goes back, as anywhere).
  if (event.key !== "Escape" && event.target instanceof Element && event.target.closest(".picker")) return;
  if (event.key === "Escape") { location.hash = $("back").getAttribute("href"); return; }
  if (event.key === "Enter") { event.preventDefault(); $("answer-form").requestSubmit(); return; }
  const input = current.keys.get(event.key.toLowerCase());
  if (input && !event.ctrlKey && !event.metaKey && !event.altKey) {
    event.preventDefault();
    input.checked = true;
    input.focus();
  }
}

// ------------------------------------------------------------------ automatic routes
async function showRoutes() {
  show("routes");
  const data = await api("/api/routes");
  const rows = data.routes.map((r) => el("tr", {},
    el("td", {}, r.headline || r.item_id, el("div", { class: "id" }, `${r.item_kind} ${r.item_id}`)),
    el("td", {}, Object.entries(r.decided).map(([q, o]) => `${q}=${o} (${r.decided_by[q]})`).join(", ")),
    el("td", {}, r.target || "–"),
    el("td", { class: "id" }, r.audited_at),
    el("td", {}, r.corrected
      ? el("span", { class: "corrected" }, `corrected to ${r.corrected.target} by ${r.corrected.reviewer}`)
      : el("button", { type: "button", class: "quiet", onclick: (e) => { e.stopPropagation(); location.hash = `#/route/${r.execution_name}`; } }, "This was wrong"))));
  $("route-rows").replaceChildren(...rows);
  $("routes-empty").hidden = rows.length > 0;
}

// ------------------------------------------------------------------ export
async function exportExamples(event) {
  event.preventDefault();
  const policy = $("export-policy").value;
  try {
    // The export comes in pages: each names the next in its X-Next-Page header.
    let text = "";
    let page = "";
    do {
      const query = new URLSearchParams();
      if (policy) query.set("policy", policy);
      if (page) query.set("page", page);
      const search = query.toString();
      const response = await api(`/api/export${search ? `?${search}` : ""}`, { raw: true });
      text += await response.text();
      page = response.headers.get("X-Next-Page") || "";
    } while (page);
    const count = text.split("\n").filter(Boolean).length;
    const link = el("a", { href: URL.createObjectURL(new Blob([text], { type: "application/x-ndjson" })),
      download: "labelled-examples.jsonl" });
    document.body.append(link);
    link.click();
    link.remove();
    $("export-result").textContent = `${count} labelled example(s) downloaded as labelled-examples.jsonl.`;
  } catch (error) {
    if (error instanceof SignInNeeded) return showSignIn(error.message);
    say(error.message);
  }
}

// ------------------------------------------------------------------ routing
async function route() {
  say("");
  const [, view, name] = (location.hash || "#/reviews").split("/");
  if (view === "sign-in" || !sessionStorage.getItem(TOKEN)) return showSignIn();
  try {
    const me = await api("/api/me");
    $("reviewer").textContent = me.reviewer;
    $("nav").hidden = false;
    $("who").hidden = false;
    if (view === "review" && name) await showItem("review", decodeURIComponent(name));
    else if (view === "route" && name) await showItem("correction", decodeURIComponent(name));
    else if (view === "routes") await showRoutes();
    else if (view === "export") show("export");
    else await showReviews();
  } catch (error) {
    if (error instanceof SignInNeeded) return showSignIn(error.message);
    say(error.message);
  }
}

async function start() {
  config = await (await fetch("/config")).json();
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("answer-form").addEventListener("submit", submitAnswer);
  $("export-form").addEventListener("submit", exportExamples);
  $("refresh").addEventListener("click", () => showReviews().catch((e) => say(e.message)));
  $("refresh-routes").addEventListener("click", () => showRoutes().catch((e) => say(e.message)));
  $("filter-kind").addEventListener("change", () => showReviews().catch((e) => say(e.message)));
  $("filter-question").addEventListener("change", () => showReviews().catch((e) => say(e.message)));
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", route);
  await route();
}

start();
