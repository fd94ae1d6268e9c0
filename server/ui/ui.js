// The page's script (server/ui/index.html, served by server/http_ui.py): a client of the public API and nothing
// more. It reads /info to know which views the served models allow, then calls /v1/detect, /v1/score,
// /v1/rerank and /v1/classify as any client would, with the API key typed into the page, and draws the answers.
// Every URL is relative to the page's <base> (the server's root path). Server data is written with textContent,
// never as HTML.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const KEY_STORE = "electric-api-key"; // this tab's key (sessionStorage: gone when the tab closes)
  const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/; // what a first-pass score or a weight may be
  const WEIGHTS = ["lm", "length", "piece", "ngram", "beta", "prior", "lm_score"];
  const NUMERIC_WEIGHTS = ["lm", "length", "piece", "ngram", "beta"];
  const state = { key: sessionStorage.getItem(KEY_STORE) || "", info: null, scorer: null, classifiers: [] };

  // ---- calling the server -------------------------------------------------------------------------------------

  /** A refusal: the server's own words (`error`), its status and error_type; status 0 when it did not answer. */
  class ApiError extends Error {
    constructor(message, status, type) {
      super(message);
      this.status = status;
      this.type = type;
    }
  }

  /** A mistake the page finds in what was typed, before calling the server. */
  class InputError extends Error {}

  async function call(route, body) {
    const headers = {};
    if (state.key) headers.authorization = `Bearer ${state.key}`;
    if (body !== undefined) headers["content-type"] = "application/json";
    let response;
    try {
      response = await fetch(route, {
        method: body === undefined ? "GET" : "POST", headers, cache: "no-store",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      throw new ApiError(`The server at ${new URL(".", document.baseURI)} does not answer (${e.message}): ` +
        "it may have stopped; start electric serve again and try once more.", 0, "unreachable");
    }
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      // not JSON (a proxy's error page): said below
    }
    if (!response.ok) {
      const said = data && typeof data.error === "string" ? data.error
        : `${route} answered ${response.status} ${response.statusText}`;
      throw new ApiError(said, response.status, (data && data.error_type) || "http_error");
    }
    if (data === null) {
      throw new ApiError(`${route} answered something that is not JSON`, response.status, "http_error");
    }
    return data;
  }

  /** Show `err` in the box `box`: the server's words and its status, or the page's own message. */
  function showError(box, err) {
    box.replaceChildren();
    if (err instanceof ApiError) {
      box.append(err.message);
      if (err.status) box.append(" ", el("span", "kind", `(${err.status} ${err.type})`));
      if (err.status === 401) {
        $("key-form").hidden = false;
        $("api-key").focus();
        box.append("\nType the server's API key above.");
      } else if (err.status === 422 && /truncate/.test(err.message)) {
        box.append("\nOr tick \u201ctruncate\u201d to cut it to the model's length.");
      }
    } else if (err instanceof InputError) {
      box.append(err.message);
    } else {
      box.append(`Something went wrong in the page: ${err}`);
      console.error(err);
    }
    box.hidden = false;
  }

  /** Run `work` for the view `name`: its button busy meanwhile, its error box cleared, then filled on failure. */
  async function run(name, work) {
    const button = $(`${name}-run`), box = $(`${name}-error`), out = $(`${name}-out`);
    button.disabled = true;
    box.hidden = true;
    try {
      const drawn = await work();
      out.replaceChildren(...drawn);
    } catch (err) {
      out.replaceChildren();
      showError(box, err);
    } finally {
      button.disabled = false;
    }
  }

  // ---- small drawing helpers ----------------------------------------------------------------------------------

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const fmt = (x, digits = 2) => (Object.is(x, -0) ? 0 : x).toFixed(digits).replace("-", "\u2212");
  const signed = (x, digits = 2) => (x > 0 ? "+" : "") + fmt(x, digits);
  const places = (x) => (Math.abs(x) < 0.01 ? 4 : 2); // enough to show a small difference is not zero

  /** `text` drawn as its tokens (code-point offsets [start, end), as the server gives them), each a span.tok
   * whose background has the alpha `alpha(token)` of `rgb`; what no token covers is plain text, and what follows
   * the last token of a `truncated` text (left unread) is struck through. `extra(token, span)` may add to each
   * span. */
  function tokenSpans(text, tokens, truncated, rgb, alpha, extra) {
    const chars = Array.from(text); // offsets count code points, not UTF-16 units
    const box = el("div", "text");
    let at = 0;
    for (const t of tokens) {
      if (t.start > at) box.append(chars.slice(at, t.start).join(""));
      const span = el("span", "tok", chars.slice(t.start, t.end).join(""));
      span.style.backgroundColor = `rgba(${rgb}, ${Math.min(1, Math.max(0, alpha(t))).toFixed(3)})`;
      extra(t, span);
      box.append(span);
      at = Math.max(at, t.end);
    }
    if (at < chars.length) {
      const rest = chars.slice(at).join("");
      box.append(truncated ? el("span", "rest", rest) : rest);
    }
    return box;
  }

  function legend(ramp, low, high) {
    const row = el("div", "legend");
    row.append(low, el("span", `ramp ${ramp}`), high);
    return row;
  }

  const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  // ---- detect -------------------------------------------------------------------------------------------------

  async function detect() {
    const text = $("detect-text").value;
    if (!text.trim()) throw new InputError("Type a text first: there is nothing to look at.");
    const truncate = $("detect-truncate").checked;
    const [detected, scored] = await Promise.all([
      call("v1/detect", { texts: [text], per_token: true, truncate }),
      call("v1/score", { texts: [text], truncate }),
    ]);
    const d = detected.results[0], s = scored.results[0];
    const summary = el("p", "summary");
    summary.append("score ", el("b", "", fmt(s.score)), ` (${s.method}: the sum over ${s.num_tokens} tokens, `,
      el("b", "", fmt(s.mean)), " a token) \u00b7 log P(nothing replaced) ", el("b", "", fmt(d.score)));
    if (d.truncated) summary.append(` \u00b7 truncated: only the first ${d.num_tokens} tokens were read`);
    const heat = tokenSpans(d.text, d.tokens, d.truncated, cssVar("--replaced"), (t) => t.prob, (t, span) => {
      span.dataset.prob = String(t.prob);
      span.title = `${t.token}: p(replaced) = ${t.prob.toFixed(3)} (logit ${fmt(t.logit)})`;
    });
    heat.id = "heatmap";
    const flagged = d.words.filter((w) => w.max_prob >= 0.5).sort((a, b) => b.max_prob - a.max_prob);
    const chips = el("div", "chips");
    chips.append(flagged.length ? "flagged words (p \u2265 0.5): " : "no word has p(replaced) \u2265 0.5");
    for (const w of flagged) chips.append(el("span", "chip", `${w.word} ${w.max_prob.toFixed(2)}`));
    return [summary, heat, legend("replaced", "p(replaced) 0", "1"), chips];
  }

  // ---- score and compare --------------------------------------------------------------------------------------

  /** The words of `text` with their code-point offsets, of its first `upTo` code points only (what was read of a
   * truncated text). */
  function words(text, upTo = Infinity) {
    const out = [];
    const chars = Array.from(text);
    if (upTo < chars.length) chars.length = upTo;
    let start = -1;
    chars.forEach((c, i) => {
      if (/\s/.test(c)) {
        if (start >= 0) out.push({ word: chars.slice(start, i).join(""), start, end: i });
        start = -1;
      } else if (start < 0) start = i;
    });
    if (start >= 0) out.push({ word: chars.slice(start).join(""), start, end: chars.length });
    return out;
  }

  /** The words of a scored text the model read: up to its last token when it was truncated. */
  const scoredWords = (r) => words(r.text, r.truncated && r.tokens.length ? r.tokens[r.tokens.length - 1].end
    : Infinity);

  const DIFF_CELLS = 250000; // the most cells of differing's table (a few ms); past it the middle differs whole

  /** The words of `a` that a longest common subsequence with `b`'s words leaves out: where `a` differs. The words
   * both begin and end with are matched first, in linear time; what is left between them is compared by the
   * quadratic LCS only when it has at most DIFF_CELLS pairs of words, else all of it is marked as differing.
   * `bCut`: `b` is the read part of a truncated text, so a word of `a` after the last one `b` has matched is not
   * known to differ, and is not marked. */
  function differing(a, b, bCut) {
    let lo = 0, endA = a.length, endB = b.length;
    while (lo < endA && lo < endB && a[lo].word === b[lo].word) lo++;
    while (endA > lo && endB > lo && a[endA - 1].word === b[endB - 1].word) { endA--; endB--; }
    const n = endA - lo, m = endB - lo;
    const openEnd = bCut && endB === b.length; // what of `a` comes after all of `b` cannot be compared
    if (n * m > DIFF_CELLS || (!m && !openEnd)) return a.slice(lo, endA);
    const same = (i, j) => a[lo + i].word === b[lo + j].word;
    const L = Array.from({ length: n + 1 }, () => new Int32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        L[i][j] = same(i, j) ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
      }
    }
    const out = [];
    let i = 0, j = 0;
    while (i < n && !(openEnd && j === m)) {
      if (j < m && same(i, j)) { i++; j++; }
      else if (j < m && L[i][j + 1] >= L[i + 1][j]) j++;
      else out.push(a[lo + i++]);
    }
    return out;
  }

  /** For positions asked in increasing order: whether each lies in one of `spans` (sorted, apart), in one pass. */
  function within(spans) {
    let k = 0;
    return (at) => {
      while (k < spans.length && spans[k].end <= at) k++;
      return k < spans.length && at >= spans[k].start;
    };
  }

  async function score() {
    const texts = $("score-text").value.split("\n").filter((line) => line.trim());
    if (!texts.length) throw new InputError("Type one sentence a line first: there is nothing to score.");
    const body = await call("v1/score", { texts, per_token: true, truncate: $("score-truncate").checked });
    const results = body.results;
    const order = results.map((_, i) => i).sort((a, b) => results[b].score - results[a].score || a - b);
    const best = results[order[0]];
    const bestWords = scoredWords(best);
    const worst = Math.max(1e-9, ...results.flatMap((r) => r.tokens.map((t) => -t.score)));
    const table = el("table");
    table.id = "scores";
    const head = table.insertRow();
    for (const h of ["", "score", "\u0394 best", "a token", "tokens", "text"]) head.append(el("th", "", h));
    order.forEach((i, place) => {
      const r = results[i];
      const row = table.insertRow();
      row.dataset.index = String(i);
      if (place === 0) row.className = "best";
      const changed = within(place === 0 ? [] : differing(scoredWords(r), bestWords, best.truncated));
      const cells = [String(place + 1), fmt(r.score), place === 0 ? "" : fmt(r.score - best.score), fmt(r.mean),
        String(r.num_tokens)];
      cells.forEach((c, k) => row.append(el("td", k ? "num" : "", c)));
      const shade = (t) => -t.score / worst;
      const text = tokenSpans(r.text, r.tokens, r.truncated, cssVar("--unlikely"), shade, (t, span) => {
        span.title = `${t.token}: ${fmt(t.score)}`;
        if (changed(t.start)) span.classList.add("diff");
      });
      const cell = el("td");
      cell.append(text);
      if (r.truncated) cell.append(el("div", "why", "truncated: only its first tokens were scored"));
      row.append(cell);
    });
    const method = el("p", "summary", `${results[0].method} scores, higher is more likely; ` +
      (results.length > 1 ? `best: line ${order[0] + 1}.` : "type more lines to compare."));
    return [method, table, legend("unlikely", "token score high", "low (unlikely)")];
  }

  // ---- rerank -------------------------------------------------------------------------------------------------

  /** The n-best list typed in the box: hypotheses, first-pass scores (null when no line has one) and the line
   * number of each. InputError naming the line for a score that is not a number, a line without a score when
   * another has one, or fewer than two hypotheses. */
  function parseNbest(raw) {
    const hyps = [], scores = [], lines = [];
    raw.split("\n").forEach((line, i) => {
      line = line.replace(/\r$/, "");
      if (!line.trim()) return;
      const tab = line.lastIndexOf("\t");
      const text = tab < 0 ? line : line.slice(0, tab);
      if (!text.trim()) throw new InputError(`line ${i + 1}: no hypothesis before its score`);
      let value = null;
      if (tab >= 0) {
        const given = line.slice(tab + 1).trim();
        if (!NUMBER.test(given) || !Number.isFinite(Number(given))) {
          throw new InputError(`line ${i + 1}: the first-pass score ${JSON.stringify(given)} is not a number`);
        }
        value = Number(given);
      }
      hyps.push(text);
      scores.push(value);
      lines.push(i + 1);
    });
    if (hyps.length < 2) {
      throw new InputError("An n-best list needs two or more hypotheses, one a line: " +
        `with ${hyps.length || "none"} there is nothing to rerank.`);
    }
    const missing = scores.indexOf(null), given = scores.findIndex((x) => x !== null);
    if (given >= 0 && missing >= 0) {
      throw new InputError(`line ${lines[missing]}: no first-pass score after a tab, but line ${lines[given]} ` +
        "has one: give a score on every line or on none");
    }
    return { hyps, scores: given >= 0 ? scores : null, lines };
  }

  function readWeights() {
    const weights = {};
    for (const name of WEIGHTS) {
      const value = $(`w-${name}`).value.trim();
      if (!NUMERIC_WEIGHTS.includes(name)) weights[name] = value;
      else if (NUMBER.test(value) && Number.isFinite(Number(value))) weights[name] = Number(value);
      else throw new InputError(`weight ${name}: ${JSON.stringify(value)} is not a number`);
    }
    return weights;
  }

  /** prior and beta make the prior of a list without first-pass scores only: greyed out while the list has them. */
  function priorApplies() {
    const scored = $("rerank-text").value.includes("\t");
    for (const id of ["w-prior", "w-beta"]) {
      $(id).disabled = scored;
      $(id).title = scored ? "a list with first-pass scores has them as its prior" : "";
    }
  }

  function resetWeights() {
    const defaults = state.info ? state.info.rerank_defaults : {};
    for (const name of WEIGHTS) if (name in defaults) $(`w-${name}`).value = String(defaults[name]);
  }

  const PARTS = [ // a hypothesis's total = the sum of these (RankedHypothesis.total in server/schemas.py)
    ["prior", "prior", (h) => h.prior],
    ["lm", "\u03bb\u00b7LM", (h, w) => w.lm * h.lm],
    ["length", "word bonus", (h, w) => w.length * h.words],
    ["piece", "piece bonus", (h, w) => w.piece * h.pieces],
    ["ngram", "\u03bc\u00b7n-gram", (h, w) => (w.ngram ? w.ngram * h.ngram : 0)],
  ];

  /** A bar of the parts of a total on the scale [-left, right]: negative parts stacked left of zero, positive ones
   * right of it, a tick at the total. */
  function bar(h, w, left, right) {
    const span = left + right || 1;
    const at = (x) => `${((left + x) / span) * 100}%`;
    const box = el("div", "bar");
    let neg = 0, pos = 0;
    for (const [cls, label, value] of PARTS) {
      const v = value(h, w);
      if (!v) continue;
      const part = el("div", `part ${cls}`);
      part.style.left = at(v < 0 ? neg + v : pos);
      part.style.width = `${(Math.abs(v) / span) * 100}%`;
      part.title = `${label} ${fmt(v, 3)}`;
      if (v < 0) neg += v; else pos += v;
      box.append(part);
    }
    const zero = el("div", "zero");
    zero.style.left = at(0);
    const total = el("div", "total");
    total.style.left = at(h.total);
    total.title = `total ${fmt(h.total, 3)}`;
    box.append(zero, total);
    return box;
  }

  async function rerank() {
    const { hyps, scores, lines } = parseNbest($("rerank-text").value);
    const weights = readWeights();
    const request = { hypotheses: hyps, weights, truncate: $("rerank-truncate").checked };
    if (scores) request.scores = scores;
    const body = await call("v1/rerank", request);
    const result = body.results[0], w = body.weights;
    const sides = result.hyps.map((h) => PARTS.map(([, , value]) => value(h, w)));
    const left = Math.max(0, ...sides.map((p) => -p.filter((x) => x < 0).reduce((a, b) => a + b, 0)));
    const right = Math.max(0, ...sides.map((p) => p.filter((x) => x > 0).reduce((a, b) => a + b, 0)));
    const best = result.hyps[0];

    const table = el("table");
    table.id = "reranked";
    const head = table.insertRow();
    for (const h of ["", "was", "hypothesis", "total", "parts of the total"]) head.append(el("th", "", h));
    result.hyps.forEach((h, place) => {
      const row = table.insertRow();
      row.dataset.rank = String(h.rank);
      row.className = [place === 0 ? "best" : "", h.rank !== place ? "moved" : ""].join(" ").trim();
      const moved = h.rank - place;
      row.append(el("td", "num", String(place + 1)));
      row.append(el("td", `num ${moved > 0 ? "up" : moved < 0 ? "down" : ""}`,
        moved ? `${moved > 0 ? "\u2191" : "\u2193"}${Math.abs(moved)} from ${h.rank + 1}` : "\u2014"));
      const text = el("td", "", h.text);
      text.title = `line ${lines[h.rank]} of the list`;
      if (place > 0) {
        const diffs = PARTS.map(([, label, value]) => [label, value(h, w) - value(best, w)])
          .filter(([, d]) => d);
        const why = diffs.map(([l, d]) => `${l} ${signed(d, places(d))}`).join(", ");
        text.append(el("div", "why", `vs the best: ${why || "equal (the earlier line wins a tie)"}`));
      }
      row.append(text, el("td", "num", fmt(h.total)));
      const cell = el("td");
      cell.append(bar(h, w, left, right));
      row.append(cell);
    });

    const summary = el("p", "summary");
    const chosen = scores ? scores.indexOf(Math.max(...scores)) : 0; // the first pass's choice
    const was = result.hyps.find((h) => h.rank === chosen);
    if (!scores && w.prior === "none") summary.append(`Line ${lines[best.rank]} has the best total.`);
    else if (best.rank === chosen) summary.append(`The first pass's choice, line ${lines[chosen]}, stays on top.`);
    else {
      summary.append(`The reranker chose line ${lines[best.rank]} over the first pass's choice, line ` +
        `${lines[chosen]} (total ${fmt(best.total)} against ${fmt(was.total)}).`);
    }
    if (result.tied) summary.append(" Another hypothesis has the same total: the earlier line won.");
    const prior = scores ? `the first-pass score (prior ${w.prior} is for a list without scores)`
      : w.prior === "rank" ? `\u2212${w.beta}\u00b7rank (prior rank: the lines' order is the first pass's)`
        : "0 (prior none: the lines' order is not used)";
    const key = el("p", "legend");
    key.append("total = ", el("span", "key prior"), `prior: ${prior}`,
      el("span", "key lm"), `${w.lm} \u00d7 LM (${w.lm_score} of the token scores)`,
      el("span", "key length"), `${w.length} \u00d7 words`, el("span", "key piece"), `${w.piece} \u00d7 pieces`);
    if (w.ngram) key.append(el("span", "key ngram"), `${w.ngram} \u00d7 n-gram LM`);
    return [summary, key, table];
  }

  // ---- classify -----------------------------------------------------------------------------------------------

  async function classify() {
    const text = $("classify-text").value, pair = $("classify-pair").value;
    if (!text.trim()) throw new InputError("Type a text first: there is nothing to classify.");
    const request = { model: $("classify-model").value, truncate: $("classify-truncate").checked };
    if (pair.trim()) request.pairs = [[text, pair]];
    else request.texts = [text];
    const body = await call("v1/classify", request);
    const r = body.results[0];
    const out = [];
    if (r.words) {
      const tags = el("div", "text");
      for (const w of r.words) {
        const tag = el("span", "tag", w.token);
        tag.append(el("small", "", `${w.label} ${w.probability.toFixed(2)}`));
        tags.append(tag, " ");
      }
      out.push(tags);
    } else if (r.value !== null && r.value !== undefined) {
      const p = el("p", "summary", "value ");
      p.append(el("b", "", fmt(r.value, 4)));
      out.push(p);
    } else {
      const grid = el("div", "prob");
      grid.id = "probabilities";
      for (const [label, p] of Object.entries(r.probabilities)) {
        const track = el("div"), fill = el("div", "fill");
        fill.style.width = `${p * 100}%`;
        track.append(fill);
        grid.append(el("span", label === r.label ? "top" : "", label), track, el("span", "num", p.toFixed(3)));
      }
      out.push(grid);
    }
    if (r.truncated) out.push(el("p", "why", "truncated: only its first tokens were read"));
    return out;
  }

  // ---- the page: connect, choose the views, switch between them ------------------------------------------------

  const VIEWS = { detect, score, rerank, classify };

  function show(name) {
    for (const b of document.querySelectorAll("#tabs button")) {
      b.setAttribute("aria-selected", String(b.dataset.view === name));
    }
    for (const v of Object.keys(VIEWS)) $(`view-${v}`).hidden = v !== name;
    if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
  }

  function describe(m, detects) {
    if (m.name === "detector") return `${m.name}: ${m.kind} for detection, ${m.backend}, up to ${m.max_length} tokens`;
    if (m.kind === "discriminator" || m.kind === "cloze") {
      return `${m.name}: ${m.kind}, ${m.method} scores, ${m.backend}, up to ${m.max_length} tokens` +
        (detects ? "" : " (no detection: it needs a discriminator)");
    }
    const labels = m.labels.length ? ` (${m.labels.join(", ")})` : "";
    return `${m.name}: ${m.regression ? "regression" : m.kind}${labels}`;
  }

  async function connect() {
    $("banner").hidden = true;
    let info;
    try {
      info = await call("info");
    } catch (err) {
      $("banner-text").textContent = err.message + (err.status ? ` (${err.status} ${err.type})` : "");
      if (err.status === 401) {
        $("key-form").hidden = false;
        $("api-key").focus();
      }
      $("retry").hidden = err.status === 401; // the key is the way on
      $("banner").hidden = false;
      $("models").textContent = err.status === 401 ? "this server needs an API key" : "not connected";
      return;
    }
    state.info = info;
    state.scorer = info.models.find((m) => m.name === "scorer") || null;
    state.classifiers = info.models.filter((m) => m.kind === "classifier" || m.kind === "tagger");
    // /v1/detect: the scorer when it is a discriminator, else the detector an adapted model carries beside it
    const detects = info.models.some((m) => m.kind === "discriminator");
    $("models").textContent = info.models.map((m) => describe(m, detects)).join(" \u00b7 ") +
      ` \u00b7 Electric ${info.version}` +
      (info.ready ? "" : " \u00b7 still loading");
    const warnings = info.models.flatMap((m) => m.training_warnings.map((x) => `${m.name}: ${x}`));
    $("warnings").textContent = `The run that trained this model warned: ${warnings.join("; ")}`;
    $("warnings").hidden = !warnings.length;
    const available = {
      detect: detects,
      score: !!state.scorer,
      rerank: !!state.scorer,
      classify: state.classifiers.length > 0,
    };
    for (const b of document.querySelectorAll("#tabs button")) b.hidden = !available[b.dataset.view];
    $("classify-model").replaceChildren(...state.classifiers.map((m) => el("option", "", m.name)));
    resetWeights();
    const wanted = location.hash.slice(1);
    const first = available[wanted] ? wanted : Object.keys(available).find((v) => available[v]);
    if (first) show(first);
    else $("models").textContent = "this server serves no model";
  }

  function start() {
    $("api-key").value = state.key;
    $("key-form").hidden = !state.key;
    $("key-form").addEventListener("submit", (e) => {
      e.preventDefault();
      state.key = $("api-key").value.trim();
      sessionStorage.setItem(KEY_STORE, state.key);
      connect();
    });
    $("retry").addEventListener("click", connect);
    window.addEventListener("hashchange", () => { // a link or the address bar names a view
      const tab = document.querySelector(`#tabs button[data-view="${location.hash.slice(1)}"]`);
      if (tab && !tab.hidden) show(tab.dataset.view);
    });
    $("w-reset").addEventListener("click", resetWeights);
    for (const b of document.querySelectorAll("#tabs button")) {
      b.addEventListener("click", () => show(b.dataset.view));
    }
    for (const [name, work] of Object.entries(VIEWS)) {
      $(`${name}-run`).addEventListener("click", () => run(name, work));
      $(`view-${name}`).addEventListener("keydown", (e) => {
        if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) run(name, work);
      });
    }
    $("rerank-text").addEventListener("keydown", (e) => { // Tab types the tab before a first-pass score
      if (e.key !== "Tab" || e.shiftKey || e.ctrlKey || e.altKey || e.metaKey) return;
      e.preventDefault();
      const box = e.target;
      box.setRangeText("\t", box.selectionStart, box.selectionEnd, "end");
      priorApplies();
    });
    $("rerank-text").addEventListener("input", priorApplies);
    priorApplies();
    connect();
  }

  start();
})();
