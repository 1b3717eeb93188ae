// dpsyn dashboard: live job progress, the job form's planner quote, the copy button and the
// query box. Plain JavaScript, no library; every page also works without it (plain forms).
"use strict";

(function () {
  const JSON_HEADERS = { Accept: "application/json" };

  // A noise multiplier (not an ε or a δ) to 4 significant digits. Every ε and δ comes from
  // the server as text, printed by the one rule of the CLI and the pages
  // (app/privacy/display.py): the script never rounds one of its own.
  function fmt(x) {
    return Number(x).toPrecision(4).replace(/\.?0+$/, "").replace(/\.?0+e/, "e");
  }

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (cls) node.className = cls;
    return node;
  }

  // --- live jobs: poll each unfinished job until it ends ---------------------------------
  function watchJob(box) {
    const id = box.dataset.jobId;
    const field = (name) => box.querySelector('[data-field="' + name + '"]');
    async function tick() {
      let state;
      try {
        const response = await fetch("/ui/jobs/" + encodeURIComponent(id) + "/status", {
          headers: JSON_HEADERS, credentials: "same-origin",
        });
        if (response.status === 429) { // over the key's rate limit: wait as told, go on
          const wait = Number(response.headers.get("Retry-After")) || 5;
          window.setTimeout(tick, wait * 1000);
          return;
        }
        if (!response.ok) return; // signed out or gone: stop quietly
        state = await response.json();
      } catch (err) {
        window.setTimeout(tick, 3000);
        return;
      }
      const status = field("status");
      if (status) {
        status.textContent = state.status;
        status.className = "tag status status-" + state.status;
      }
      const bar = field("progress");
      if (bar) {
        bar.max = state.total || 1;
        bar.value = state.status === "succeeded" ? bar.max : state.done; // complete
      }
      const text = field("progress-text");
      if (text) text.textContent = state.progress_text;
      const charged = field("charged");
      if (charged) charged.textContent = state.charged_text;
      const charge = field("charge");
      if (charge) {
        charge.textContent = state.charge || "—";
        charge.className = "tag charge charge-" + (state.charge || "none");
      }
      const note = field("charge-note");
      if (note) note.textContent = state.charge_note;
      if (charged && charged.parentElement) charged.parentElement.title = state.charge_note;
      const started = field("started");
      if (started) started.textContent = state.started;
      const duration = field("duration");
      if (duration) duration.textContent = state.duration;
      const finished = field("finished");
      if (finished && state.finished) finished.textContent = state.finished;
      const error = field("error");
      if (error) error.textContent = state.error || "";
      if (state.prompt_id) {
        const link = field("prompt");
        if (link) {
          link.href = "/ui/prompts/" + encodeURIComponent(state.prompt_id);
          link.hidden = false;
        }
      }
      if (state.terminal) {
        box.dataset.live = "no";
        const cancel = field("cancel");
        if (cancel) cancel.remove();
        return;
      }
      window.setTimeout(tick, 1000);
    }
    window.setTimeout(tick, 500);
  }

  // --- the job form: parameters of the chosen method, and the planner's quote ---------------
  function setupJobForm(form) {
    const method = form.querySelector("#job-method");
    const quoteBox = form.querySelector("#quote");
    function showFields() {
      const chosen = method.value;
      form.querySelectorAll("label.param").forEach((label) => {
        const on = label.dataset.methods.split(" ").includes(chosen);
        label.hidden = !on;
        label.querySelector("input").disabled = !on;
      });
      const option = method.selectedOptions[0];
      const readsPublic = option && option.dataset.readsPublic === "yes";
      form.querySelectorAll(".public-only").forEach((label) => {
        label.hidden = !readsPublic;
        label.querySelector("select").disabled = !readsPublic;
      });
    }
    async function quote() {
      quoteBox.replaceChildren(el("span", "Planning…", "muted"));
      let body;
      try {
        const response = await fetch(form.dataset.quote, {
          method: "POST", body: new FormData(form), headers: JSON_HEADERS,
          credentials: "same-origin",
        });
        body = await response.json();
        if (!response.ok) {
          quoteBox.replaceChildren(el("span", (body.error && body.error.message) || "refused", "error"));
          return;
        }
      } catch (err) {
        quoteBox.replaceChildren(el("span", "could not reach the planner", "error"));
        return;
      }
      const text = body.text;
      const line = el("span");
      line.id = "quote-result";
      line.append(
        "This job costs ε = ", el("strong", text.epsilon),
        " (δ = " + text.delta + "). Composed spend at the budget's δ = " + text.spent_delta +
        ": " + text.spent + " now, ",
        el("strong", text.spent_after), " after it, of a budget of " + text.budget +
        " (plain sum after: " + text.plain_sum_after + " at δ = " + text.plain_sum_delta_after +
        ", the jobs' δ summed" + (body.plain_sum_after < body.spent_after
          ? ": a sum at a larger δ can read below the spend" : "") + "). ",
        el("span", body.fits ? "It fits." : "It does NOT fit the budget.", body.fits ? "ok" : "error"),
      );
      if (body.spent_after <= body.spent * (1 + 1e-9) && body.groups && body.groups.length > 1) {
        line.append(" ", el("span", "It adds 0 to the dataset's composed spend: the label " +
          "groups it charges stay at or below the group that sets it.", "zero-extra"));
      }
      const parts = [line];
      if (body.counts_epsilon > 0) {
        const counts = el("div", "Of the composed spend, ε = " + text.counts_epsilon +
          " is the dataset's count release, charged once for the dataset (not by this job).",
          "small muted");
        counts.id = "quote-counts";
        parts.push(counts);
      }
      const labels = Object.keys(body.noise || {});
      if (labels.length) parts.push(quoteNoise(body.noise, labels));
      if (body.groups && body.groups.length) parts.push(quoteGroups(body.groups, text.groups));
      quoteBox.replaceChildren(...parts);
    }
    // Each label's noise multiplier: every label is calibrated to its own released size.
    function quoteNoise(noise, labels) {
      const line = el("div", "Noise multiplier σ per label: " +
        labels.map((label) => label + " " + fmt(noise[label])).join(", "), "small");
      line.id = "quote-noise";
      return line;
    }
    // Each label group's spend before and after the job: the job moves only the groups it
    // charges, and the dataset's spend is the binding (largest) group's.
    function quoteGroups(groups, texts) {
      const table = el("table", undefined, "grid small quote-groups");
      table.id = "quote-groups";
      const head = el("tr");
      ["Label group", "Now", "After", ""].forEach((name) => head.append(el("th", name)));
      table.append(head);
      groups.forEach((g, i) => {
        const row = el("tr");
        row.dataset.group = g.group;
        if (g.binding_after) row.className = "binding";
        const after = el("td", texts[i].after, "num" + (g.charged ? " charged" : ""));
        const note = g.binding_after ? "sets the dataset's spend"
          : (g.charged ? "charged by this job" : "not charged");
        const said = el("td");
        said.append(el("span", note, g.binding_after ? "tag tag-binding" : "muted"));
        row.append(el("td", g.group), el("td", texts[i].before, "num"), after, said);
        table.append(row);
      });
      return table;
    }
    method.addEventListener("change", () => { showFields(); });
    form.querySelector("#job-quote").addEventListener("click", quote);
    showFields();
  }

  // --- copy buttons ------------------------------------------------------------------------
  function setupCopy(button) {
    button.addEventListener("click", async () => {
      const source = document.querySelector(button.dataset.copy);
      const text = source ? source.textContent.trim() : "";
      try {
        await navigator.clipboard.writeText(text);
      } catch (err) {
        const area = el("textarea", text);
        document.body.append(area);
        area.select();
        document.execCommand("copy");
        area.remove();
      }
      const note = button.parentElement.querySelector("[data-copied]");
      if (note) note.hidden = false;
    });
  }

  // --- the query box: answer without reloading (the query stays in the box, client-side) ----
  function setupComplete(form) {
    const answer = document.getElementById("answer");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      answer.replaceChildren(el("span", "Answering…", "muted"));
      try {
        const response = await fetch(form.action, {
          method: "POST", body: new FormData(form), headers: JSON_HEADERS,
          credentials: "same-origin",
        });
        const body = await response.json();
        if (!response.ok) {
          answer.replaceChildren(el("p", (body.error && body.error.message) || "refused", "error"));
          return;
        }
        const line = el("p", "Answer: ");
        const strong = el("strong", body.kind === "classification" ? body.label : body.value);
        strong.id = "answer-label";
        line.append(strong);
        const parts = [line];
        if (body.scores) {
          const table = el("table", undefined, "grid small");
          const head = el("tr");
          head.append(el("th", "Label"), el("th", "Score"));
          table.append(head);
          Object.entries(body.scores).forEach(([label, score]) => {
            const row = el("tr");
            row.append(el("td", label), el("td", Number(score).toFixed(3), "num"));
            table.append(row);
          });
          parts.push(table);
        }
        answer.replaceChildren(...parts);
      } catch (err) {
        answer.replaceChildren(el("p", "could not reach the server", "error"));
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    document.querySelectorAll('[data-job-id][data-live="yes"]').forEach(watchJob);
    const jobForm = document.getElementById("job-form");
    if (jobForm) setupJobForm(jobForm);
    document.querySelectorAll("[data-copy]").forEach(setupCopy);
    const complete = document.getElementById("complete-form");
    if (complete) setupComplete(complete);
    document.querySelectorAll("form[data-autosubmit] select").forEach((select) => {
      select.addEventListener("change", () => select.form.submit());
    });
    document.querySelectorAll("[data-back]").forEach((link) => {
      link.addEventListener("click", (event) => { event.preventDefault(); history.back(); });
    });
  });
})();
