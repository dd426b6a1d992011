// The option picker of a question with many options (an intent catalogue of 150, a help desk's
// hundred groups): one filter box over a list ordered by the deciding readout's probability, so
// the head's top suggestions come first. Keyboard only: type to filter (option id and description,
// every word must match), Up/Down move through what is shown, Enter chooses and moves on (to the
// next question's picker, else the Submit button), Esc clears the filter. The choice is a radio
// input of the form, as for a question with few options. Text goes in through textContent only.

// A question with more options than a row of keys (1 … 0) gets the picker.
export const PICKER_MIN_OPTIONS = 11;
// How many of the ranked options are marked as the readout's top suggestions.
const TOP = 5;

function node(tag, attributes = {}, ...children) {
  const made = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") made.className = value;
    else made.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    made.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return made;
}

const percent = (p) => (p === null || p === undefined ? "–" : `${(100 * p).toFixed(1)}%`);

function words(text) {
  return text.toLowerCase().split(/[\s_\-./:]+/).filter(Boolean);
}

// Every word typed must begin a word of the option's id or description, or occur in its id.
function matches(haystack, wanted) {
  return wanted.every((w) => haystack.id.includes(w) || haystack.words.some((h) => h.startsWith(w)));
}

// The picker's fieldset for `question` (the item page's question view, options with `probability`,
// `ranked`: option ids best first). `onChosen(question)` runs after Enter chooses an option.
export function pickerBlock(question, legend, meta, onChosen) {
  const order = question.ranked && question.ranked.length === question.options.length
    ? question.ranked : question.options.map((o) => o.id);
  const byId = new Map(question.options.map((o) => [o.id, o]));
  // A sampled check's question is blind (no ranking, no suggestion): no option is marked "top".
  const top = new Set(question.blind ? [] : order.slice(0, TOP));
  const listId = `pick-list-${question.id}`;
  const filter = node("input", {
    type: "search", class: "pick-filter", id: `pick-${question.id}`, autocomplete: "off", spellcheck: "false",
    role: "combobox", "aria-controls": listId, "aria-expanded": "true", "aria-autocomplete": "list",
    placeholder: `Type to filter ${question.options.length} options; ↑ ↓ move, Enter chooses`,
    "data-question": question.id,
  });
  const count = node("span", { class: "pick-count", "aria-live": "polite" });
  const chosenLine = node("p", { class: "pick-chosen" });
  const rows = order.map((id, rank) => {
    const option = byId.get(id);
    const probability = option.probability ?? option.head ?? option.letters;
    const input = node("input", { type: "radio", name: `q-${question.id}`, value: option.id, tabindex: "-1",
      checked: !question.blind && option.id === question.suggested, "data-question": question.id });
    const label = node("label", { class: "option pick-option", id: `pick-${question.id}-${rank}`, role: "option",
      "data-option": option.id },
    node("span", { class: "rank" }, String(rank + 1)), input,
    node("span", { class: "what" }, node("b", {}, option.id),
      top.has(option.id) ? node("span", { class: "suggested" }, option.id === question.suggested ? "suggested" : "top") : null,
      node("small", {}, option.description, option.target ? ` → ${option.target}` : "", option.escalate ? " (escalates)" : "")),
    node("span", { class: "probs" }, percent(probability),
      node("div", { class: "pbar", "data-width": probability ?? 0 })));
    return { option, input, label, haystack: { id: option.id.toLowerCase(), words: words(`${option.id} ${option.description}`) } };
  });
  const list = node("div", { class: "pick-list", id: listId, role: "listbox" }, rows.map((r) => r.label));
  let shown = rows;
  let active = 0;

  function showChosen() {
    const chosen = rows.find((r) => r.input.checked);
    chosenLine.textContent = chosen ? `Chosen: ${chosen.option.id}${chosen.option.target ? ` → ${chosen.option.target}` : ""}` : "Nothing chosen yet";
  }

  function highlight(index) {
    for (const r of rows) r.label.classList.remove("active");
    active = Math.max(0, Math.min(index, shown.length - 1));
    const row = shown[active];
    if (!row) { filter.removeAttribute("aria-activedescendant"); return; }
    row.label.classList.add("active");
    filter.setAttribute("aria-activedescendant", row.label.id);
    row.label.scrollIntoView({ block: "nearest" });
  }

  function apply() {
    const wanted = words(filter.value);
    shown = rows.filter((r) => matches(r.haystack, wanted));
    for (const r of rows) r.label.hidden = !shown.includes(r);
    count.textContent = wanted.length ? `${shown.length} of ${rows.length} match` : `${rows.length} options, best first`;
    highlight(0);
  }

  function choose(row) {
    row.input.checked = true;
    showChosen();
  }

  filter.addEventListener("input", apply);
  filter.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      highlight(active + (event.key === "ArrowDown" ? 1 : -1));
    } else if (event.key === "PageDown" || event.key === "PageUp") {
      event.preventDefault();
      highlight(active + (event.key === "PageDown" ? 10 : -10));
    } else if (event.key === "Enter") {
      event.preventDefault();
      if (shown[active]) { choose(shown[active]); onChosen(question); }
    } else if (event.key === "Escape" && filter.value) {
      event.preventDefault();
      event.stopPropagation();
      filter.value = "";
      apply();
    }
  });
  for (const r of rows) {
    r.input.addEventListener("change", showChosen);
    r.label.addEventListener("mousemove", () => highlight(shown.indexOf(r)));
  }
  apply();
  showChosen();
  return node("fieldset", { class: "picker", "data-question": question.id }, node("legend", {}, legend), meta,
    node("div", { class: "pick-bar" }, filter, count), chosenLine, list);
}

// The picker's filter box of a question, or null when the question has few options.
export function pickerFilter(root, questionId) {
  return root.querySelector(`input.pick-filter[data-question="${CSS.escape(questionId)}"]`);
}
