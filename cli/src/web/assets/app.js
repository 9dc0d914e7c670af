// The evi web viewer. Everything a transcript holds is data: this script
// builds every node with createElement and puts text in with textContent or
// append(string), never through an HTML parser, and only http, https and
// mailto URLs ever become links. The server's Content-Security-Policy
// (Trusted Types with no policy) makes any HTML sink throw besides.
'use strict';

(() => {
  const csrf = document.querySelector('meta[name="evi-csrf"]').content;
  const main = document.getElementById('main');
  const where = document.getElementById('where');
  const params = new URLSearchParams(location.search);
  const PAGE = 50;

  // ---- DOM helpers -------------------------------------------------------

  /** An element with properties (never event-handler attributes) and children. */
  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null) continue;
        if (k === 'class') e.className = v;
        else if (k === 'data') Object.assign(e.dataset, v);
        else e[k] = v;
      }
    }
    for (const k of kids) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function bytes(n) {
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KB';
    return (n / 1024 / 1024).toFixed(1) + ' MB';
  }

  function when(ts) {
    if (!ts) return '';
    const d = new Date(ts);
    return isNaN(d) ? ts : d.toLocaleString(undefined, {
      year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
    });
  }

  /** A URL that may become a link: absolute http, https or mailto only. */
  function safeUrl(text) {
    let u;
    try {
      u = new URL(text);
    } catch (_) {
      return null;
    }
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
  }

  function link(href, ...kids) {
    return el('a', { href, rel: 'noopener noreferrer', target: '_blank' }, ...kids);
  }

  /** `/?session=…&…`, keeping nothing but what is given. */
  function viewUrl(q) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
    const s = p.toString();
    return '/' + (s ? '?' + s : '');
  }

  // ---- API ---------------------------------------------------------------

  class ApiFailure extends Error {
    constructor(status, body) {
      super(body && body.message ? body.message : 'HTTP ' + status);
      this.status = status;
      this.body = body || {};
    }
  }

  async function api(path, init) {
    const resp = await fetch(path, Object.assign({
      credentials: 'same-origin',
      headers: { Accept: 'application/json' },
    }, init || {}));
    let body = null;
    try {
      body = await resp.json();
    } catch (_) {
      body = null;
    }
    if (!resp.ok) throw new ApiFailure(resp.status, body);
    return body;
  }

  function failure(err, extra) {
    const box = el('div', { class: 'failure' },
      el('p', { class: 'message' }, err.message));
    if (err.body && err.body.hint) box.append(el('p', { class: 'hint' }, 'hint: ' + err.body.hint));
    if (err.body && Array.isArray(err.body.matches) && err.body.matches.length) {
      const ul = el('ul', { class: 'matches' });
      for (const m of err.body.matches) ul.append(el('li', null, el('a', { href: viewUrl({ session: m }) }, m)));
      box.append(ul);
    }
    if (extra) box.append(extra);
    return box;
  }

  // ---- Markdown, as DOM nodes --------------------------------------------
  // A CommonMark subset that agents write: fences, headings, lists, quotes,
  // tables, rules, paragraphs; code spans, emphasis, strike, links, autolinks.
  // Images become links (nothing is loaded from elsewhere).

  const MAX_DEPTH = 6;
  const FENCE = /^ {0,3}(`{3,}|~{3,})(.*)$/;
  const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t#]*$/;
  const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
  const TABLE_SEP = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;

  function markdown(text, depth) {
    depth = depth || 0;
    const out = document.createDocumentFragment();
    const lines = text.replace(/\r\n?/g, '\n').split('\n');
    let i = 0;
    let para = [];
    const flush = () => {
      if (para.length) {
        const p = el('p');
        inline(para.join('\n'), p);
        out.append(p);
        para = [];
      }
    };
    while (i < lines.length) {
      const line = lines[i];
      if (depth >= MAX_DEPTH) {
        para.push(line);
        i++;
        continue;
      }
      let m;
      if (!line.trim()) {
        flush();
        i++;
      } else if ((m = FENCE.exec(line))) {
        flush();
        const fence = m[1];
        const body = [];
        i++;
        while (i < lines.length) {
          const close = lines[i].trim();
          if (close.startsWith(fence) && close.replace(new RegExp('^\\' + fence[0] + '+'), '') === '') break;
          body.push(lines[i]);
          i++;
        }
        i++;
        const code = el('code', null, body.join('\n'));
        const info = m[2].trim().split(/\s+/)[0];
        if (info) code.dataset.lang = info;
        out.append(el('pre', { class: 'code' }, code));
      } else if ((m = HEADING.exec(line))) {
        flush();
        const h = el('h' + Math.min(6, m[1].length + 2), { class: 'md-h' });
        inline(m[2] || '', h);
        out.append(h);
        i++;
      } else if (RULE.test(line)) {
        flush();
        out.append(el('hr'));
        i++;
      } else if (QUOTE.test(line)) {
        flush();
        const body = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          body.push(m[1]);
          i++;
        }
        out.append(el('blockquote', null, markdown(body.join('\n'), depth + 1)));
      } else if ((m = ITEM.exec(line))) {
        flush();
        const ordered = /\d/.test(m[2][0]);
        const list = el(ordered ? 'ol' : 'ul');
        if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
        while (i < lines.length && (m = ITEM.exec(lines[i])) && /\d/.test(m[2][0]) === ordered) {
          const indent = m[1].length + m[2].length + 1;
          const body = [m[3]];
          i++;
          while (i < lines.length) {
            const next = lines[i];
            if (!next.trim()) {
              // A blank line continues the item only if indented text follows.
              if (i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1])) {
                body.push('');
                i++;
                continue;
              }
              break;
            }
            if (ITEM.exec(next) && !/^\s{2,}/.test(next)) break;
            if (/^\s{2,}/.test(next)) body.push(next.slice(Math.min(indent, next.search(/\S/))));
            else if (FENCE.test(next) || HEADING.test(next) || QUOTE.test(next)) break;
            else body.push(next);
            i++;
          }
          list.append(el('li', null, markdown(body.join('\n'), depth + 1)));
          if (i < lines.length && !lines[i].trim()) i++;
        }
        out.append(list);
      } else if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
        flush();
        const cells = (row) => row.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());
        const table = el('table', { class: 'md-table' });
        const head = el('tr');
        for (const c of cells(line)) {
          const th = el('th');
          inline(c, th);
          head.append(th);
        }
        table.append(el('thead', null, head));
        const tbody = el('tbody');
        i += 2;
        while (i < lines.length && lines[i].includes('|') && lines[i].trim()) {
          const tr = el('tr');
          for (const c of cells(lines[i])) {
            const td = el('td');
            inline(c, td);
            tr.append(td);
          }
          tbody.append(tr);
          i++;
        }
        table.append(tbody);
        out.append(el('div', { class: 'table-wrap' }, table));
      } else {
        para.push(line);
        i++;
      }
    }
    flush();
    return out;
  }

  /** `[text](url)` starting at `s[i] === '['`: {text, url, end} or null. */
  function bracketLink(s, i) {
    let depth = 0;
    let j = i;
    for (; j < s.length; j++) {
      if (s[j] === '\\') { j++; continue; }
      if (s[j] === '[') depth++;
      else if (s[j] === ']' && --depth === 0) break;
    }
    if (j >= s.length || s[j + 1] !== '(') return null;
    let k = j + 2;
    let parens = 1;
    for (; k < s.length; k++) {
      if (s[k] === '(') parens++;
      else if (s[k] === ')' && --parens === 0) break;
      else if (s[k] === '\n') return null;
    }
    if (k >= s.length) return null;
    let target = s.slice(j + 2, k).trim();
    const titled = /^(\S+)\s+(".*"|'.*')$/.exec(target);
    if (titled) target = titled[1];
    if (target.startsWith('<') && target.endsWith('>')) target = target.slice(1, -1);
    return { text: s.slice(i + 1, j), url: target, end: k + 1 };
  }

  const AUTOLINK = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/;
  const BARE_URL = /^https?:\/\/[^\s<>"'`]+[^\s<>"'`.,;:!?)\]]/;
  const ESCAPABLE = /[\\`*_{}[\]()#+\-.!~<>|]/;
  // How far to look for the end of an emphasis: keeps a long text with
  // many stray `*` linear enough.
  const EMPH_REACH = 2000;

  function inline(s, parent) {
    let buf = '';
    let i = 0;
    const flush = () => {
      if (buf) {
        parent.append(buf);
        buf = '';
      }
    };
    while (i < s.length) {
      const c = s[i];
      if (c === '\\' && i + 1 < s.length && ESCAPABLE.test(s[i + 1])) {
        buf += s[i + 1];
        i += 2;
        continue;
      }
      if (c === '`') {
        let n = 1;
        while (s[i + n] === '`') n++;
        const tick = '`'.repeat(n);
        let close = s.indexOf(tick, i + n);
        while (close !== -1 && s[close + n] === '`') {
          let m = close;
          while (s[m] === '`') m++;
          close = s.indexOf(tick, m);
        }
        if (close === -1) {
          buf += tick;
          i += n;
          continue;
        }
        flush();
        let code = s.slice(i + n, close).replace(/\n/g, ' ');
        if (/^ .* $/.test(code) && code.trim()) code = code.slice(1, -1);
        parent.append(el('code', null, code));
        i = close + n;
        continue;
      }
      if (c === '[' || (c === '!' && s[i + 1] === '[')) {
        const image = c === '!';
        const l = bracketLink(s, image ? i + 1 : i);
        if (l) {
          flush();
          const href = safeUrl(l.url);
          const label = image ? 'image: ' + (l.text || l.url) : l.text;
          if (href) {
            const a = link(href);
            if (image) a.append(label);
            else inline(label, a);
            a.title = href;
            parent.append(a);
          } else {
            // Not followed: shown as text, with the target on hover.
            const span = el('span', { class: 'dead-link', title: 'link not followed: ' + l.url });
            inline(label, span);
            parent.append(span);
          }
          i = l.end;
          continue;
        }
      }
      if (c === '<') {
        const m = AUTOLINK.exec(s.slice(i, i + 2100));
        const href = m && safeUrl(m[1]);
        if (href) {
          flush();
          parent.append(link(href, m[1]));
          i += m[0].length;
          continue;
        }
      }
      if (c === 'h' && (i === 0 || /[\s(]/.test(s[i - 1]))) {
        const m = BARE_URL.exec(s.slice(i, i + 2100));
        const href = m && safeUrl(m[0]);
        if (href) {
          flush();
          parent.append(link(href, m[0]));
          i += m[0].length;
          continue;
        }
      }
      if (c === '*' || c === '_' || c === '~') {
        let n = 1;
        while (s[i + n] === c && n < 3) n++;
        const intraword = c === '_' && i > 0 && /\w/.test(s[i - 1]);
        const run = c.repeat(c === '~' ? 2 : Math.min(n, 2));
        if (!intraword && (c !== '~' || n >= 2) && s[i + run.length] && !/\s/.test(s[i + run.length])) {
          const close = s.indexOf(run, i + run.length);
          const inner = close === -1 ? '' : s.slice(i + run.length, close);
          const after = close === -1 ? '' : s[close + run.length];
          if (close !== -1 && close - i < EMPH_REACH && inner && !/\s$/.test(inner) &&
              !(c === '_' && after && /\w/.test(after))) {
            flush();
            const tag = c === '~' ? 'del' : run.length === 2 ? 'strong' : 'em';
            const e = el(tag);
            inline(inner, e);
            parent.append(e);
            i = close + run.length;
            continue;
          }
        }
        buf += s.slice(i, i + n);
        i += n;
        continue;
      }
      buf += c;
      i++;
    }
    flush();
  }

  // ---- The list ----------------------------------------------------------

  async function showList() {
    document.title = 'evi sessions';
    where.textContent = '';
    clear(main);
    const q = el('input', { type: 'search', placeholder: 'Search first messages and ids', value: params.get('q') || '', class: 'search' });
    q.setAttribute('aria-label', 'Search');
    const day = el('select', { class: 'day' }, el('option', { value: '' }, 'All days'));
    day.setAttribute('aria-label', 'Day');
    // Which agent's sessions: shown once the first page says another
    // agent is turned on (`[agents]` in config.toml).
    const agent = el('select', { class: 'agent-filter', hidden: true }, el('option', { value: '' }, 'Every agent'));
    agent.setAttribute('aria-label', 'Agent');
    const count = el('span', { class: 'count' });
    const rows = el('div', { class: 'rows', id: 'rows' });
    const more = el('div', { class: 'sentinel' });
    main.append(fullText(), el('div', { class: 'controls' }, q, day, agent, count), rows, more);

    let next = 0;
    let loading = false;
    let generation = 0;
    let daysFilled = false;
    // The day list comes with the first page; until then the URL's day filters.
    const wantDay = params.get('day') || '';
    const wantAgent = params.get('agent') || '';

    async function load(reset) {
      if (loading && !reset) return;
      const mine = reset ? ++generation : generation;
      if (reset) {
        next = 0;
        clear(rows);
      }
      if (next === null) return;
      loading = true;
      try {
        const page = await api('/api/sessions?' + new URLSearchParams({
          q: q.value, day: daysFilled ? day.value : wantDay,
          agent: daysFilled ? agent.value : wantAgent, offset: String(next), limit: String(PAGE),
        }));
        if (mine !== generation) return;
        if (!daysFilled) {
          for (const d of page.days) {
            day.append(el('option', { value: d.day }, d.day + ' (' + d.sessions + ')'));
          }
          day.value = wantDay;
          for (const a of page.agents || []) agent.append(el('option', { value: a }, a));
          agent.value = wantAgent;
          agent.hidden = (page.agents || []).length < 2 && !wantAgent;
          daysFilled = true;
        }
        count.textContent = page.total + (page.total === 1 ? ' session' : ' sessions');
        for (const s of page.sessions) rows.append(row(s));
        if (!page.total) rows.append(el('p', { class: 'note' }, q.value || day.value || agent.value ? 'No session matches.' : 'No sessions in this eVi home yet.'));
        next = page.next_offset;
        main.dataset.more = next === null ? 'no' : 'yes';
        main.dataset.state = 'ready';
      } catch (err) {
        rows.append(failure(err));
        next = null;
        main.dataset.more = 'no';
        main.dataset.state = 'failed';
      } finally {
        loading = false;
      }
      // A short first page leaves the sentinel in view: keep going.
      if (next !== null && more.getBoundingClientRect().top < innerHeight) load(false);
    }

    let timer = null;
    const refilter = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        history.replaceState(null, '', viewUrl({ q: q.value, day: day.value, agent: agent.value }));
        load(true);
      }, 200);
    };
    q.addEventListener('input', refilter);
    day.addEventListener('change', refilter);
    agent.addEventListener('change', refilter);
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) load(false);
    }).observe(more);
    await load(true);
  }

  // ---- Full-text search -------------------------------------------------
  // Every message of every session, through the same index and query rules
  // as `evi sessions search`. Hits link to their entry in its session.

  function fullText() {
    const box = el('form', { class: 'fulltext', role: 'search' });
    const input = el('input', {
      type: 'search', class: 'fts', name: 'search', value: params.get('search') || '',
      placeholder: 'Search every message: words and "quoted phrases"',
    });
    input.setAttribute('aria-label', 'Search every message');
    const role = el('select', { class: 'fts-role' },
      el('option', { value: '' }, 'Any role'),
      ...['user', 'assistant', 'tool', 'system'].map((r) => el('option', { value: r }, r)));
    role.setAttribute('aria-label', 'Role');
    role.value = params.get('role') || '';
    const days = el('select', { class: 'fts-days' },
      el('option', { value: '' }, 'Any time'),
      ...[[1, 'Today'], [7, 'Last 7 days'], [30, 'Last 30 days'], [365, 'Last year']]
        .map(([n, label]) => el('option', { value: String(n) }, label)));
    days.setAttribute('aria-label', 'Days');
    days.value = params.get('days') || '';
    const status = el('span', { class: 'fts-count' });
    const hits = el('div', { class: 'hits', id: 'hits' });
    box.append(el('div', { class: 'controls' }, input, role, days, status), hits);
    let generation = 0;
    const run = async () => {
      const mine = ++generation;
      history.replaceState(null, '', viewUrl({
        search: input.value, role: role.value, days: days.value,
        q: params.get('q'), day: params.get('day'),
      }));
      clear(hits);
      status.textContent = '';
      if (!input.value.trim()) {
        box.dataset.state = 'idle';
        return;
      }
      box.dataset.state = 'searching';
      try {
        const r = await api('/api/search?' + new URLSearchParams({
          q: input.value, role: role.value, days: days.value, limit: '50',
        }));
        if (mine !== generation) return;
        status.textContent = r.hits.length + (r.hits.length === 1 ? ' hit' : ' hits');
        for (const h of r.hits) hits.append(hit(h));
        if (!r.hits.length) hits.append(el('p', { class: 'note' }, 'No message matches.'));
        box.dataset.state = 'done';
      } catch (err) {
        if (mine !== generation) return;
        hits.append(failure(err));
        box.dataset.state = 'failed';
      }
    };
    let timer = null;
    const later = () => {
      clearTimeout(timer);
      timer = setTimeout(run, 250);
    };
    box.addEventListener('submit', (e) => {
      e.preventDefault();
      clearTimeout(timer);
      run();
    });
    input.addEventListener('input', later);
    role.addEventListener('change', later);
    days.addEventListener('change', later);
    box.dataset.state = 'idle';
    if (input.value.trim()) run();
    return box;
  }

  function hit(h) {
    const snip = el('span', { class: 'snippet' });
    for (const part of h.snippet) snip.append(part.match ? el('mark', null, part.text) : part.text);
    const title = h.title || '(no user message)';
    const open = h.open || h.session;
    return el('a', { class: 'hit', href: viewUrl({ session: open, entry: h.entry }), data: { session: open, entry: h.entry } },
      el('span', { class: 'hit-head' },
        el('span', { class: 'hit-title' }, title.length > 120 ? title.slice(0, 119) + '…' : title),
        h.agent && h.agent !== 'evi' ? el('span', { class: 'agent-tag' }, h.agent) : null,
        el('span', { class: 'who ' + h.role }, h.role),
        el('span', { class: 'when' }, when(h.ts) || h.day),
        el('span', { class: 'id' }, h.short_id)),
      snip);
  }

  /** What a listed session opens by: its id, another agent's by its
   * stream name (`claude-code/<id>`), which names it alone. */
  function openId(s) {
    return s.agent && s.agent !== 'evi' && !s.id.includes('/') ? s.agent + '/' + s.id : s.id;
  }

  function row(s) {
    // A title given with `evi sessions title` stands for the session.
    const named = s.title || s.first_message;
    const title = named ? named : '(no user message)';
    const other = s.agent && s.agent !== 'evi';
    const id = openId(s);
    return el('a', { class: 'row', href: viewUrl({ session: id }), data: { session: id, agent: s.agent || 'evi' } },
      el('span', { class: 'when' }, when(s.end || s.start)),
      el('span', { class: 'first' + (named ? '' : ' none') },
        other ? el('span', { class: 'agent-tag' }, s.agent) : null,
        title.length > 200 ? title.slice(0, 199) + '…' : title,
        other && s.project ? el('span', { class: 'project', title: 'project on this device' }, s.project) : null),
      el('span', { class: 'stat msgs', title: 'messages on the active branch' }, s.messages + ' msgs'),
      el('span', { class: 'stat branches' + (s.branches > 1 ? ' forked' : ''), title: 'branches' }, s.branches + (s.branches === 1 ? ' branch' : ' branches')),
      el('span', { class: 'id' }, s.short_id));
  }

  // ---- A session ---------------------------------------------------------

  async function showSession(id) {
    document.title = 'evi session';
    clear(main);
    const through = params.get('through');
    const target = params.get('entry');
    let first;
    try {
      first = await api(sessionApi(id, through, 0, target));
    } catch (err) {
      notHere(id, err);
      return;
    }
    const s = first.session;
    document.title = 'evi session ' + s.short_id;
    where.textContent = 'session ' + s.short_id;
    const head = el('section', { class: 'session-head' },
      el('h1', null, s.title || s.first_message || '(no user message)'),
      el('p', { class: 'meta' },
        s.agent && s.agent !== 'evi' ? el('span', { class: 'agent-tag' }, s.agent) : null,
        el('span', { class: 'id' }, s.id), ' · ',
        s.project ? el('span', { class: 'project', title: 'project on this device' }, s.project) : null,
        s.project ? ' · ' : null,
        el('span', { id: 'branch-count' }, first.branch_messages + ' messages on this branch'), ' · ',
        s.branches + (s.branches === 1 ? ' branch' : ' branches'),
        s.start ? ' · ' + when(s.start) + ' → ' + when(s.end) : '',
        first.leaf !== first.active_leaf ? ' · ' : '',
        first.leaf !== first.active_leaf ? el('a', { href: viewUrl({ session: s.id }), class: 'to-active' }, 'back to the active branch') : null),
      // The working tree the newest handoff carried (`evi sessions handoff`).
      s.git_state ? el('p', { class: 'meta git-state' },
        'working tree at handoff' + (s.git_state.ts ? ' (' + when(s.git_state.ts) + ')' : '') + ': ' + s.git_state.summary) : null);
    const list = el('div', { class: 'messages', id: 'messages' });
    const more = el('div', { class: 'sentinel' });
    head.append(rewindBox(s.id));
    main.append(head);
    if (first.roots.length) main.append(forkBox(s.id, first.roots, 'The session starts in more than one place:'));
    const earlier = el('button', { type: 'button', class: 'earlier' }, 'Show earlier messages');
    if (first.offset > 0) main.append(earlier);
    main.append(list, more);
    if (first.pending_bytes > 0) main.append(el('p', { class: 'note' }, 'A line is still being written (' + bytes(first.pending_bytes) + ').'));

    const leaf = first.leaf;
    let next = first.next_offset;
    let loading = false;
    const add = (page) => {
      for (const m of page.messages) list.append(message(s.id, m));
      next = page.next_offset;
      main.dataset.more = next === null ? 'no' : 'yes';
      more.textContent = next === null ? '' : 'Loading more…';
    };
    add(first);
    // Pages before the one a search hit opened on, one at a time.
    let before = first.offset;
    earlier.addEventListener('click', async () => {
      earlier.disabled = true;
      const from = Math.max(0, before - PAGE);
      try {
        const page = await api(sessionApi(s.id, leaf, from, null, before - from));
        const at = list.firstChild;
        for (const m of page.messages) list.insertBefore(message(s.id, m), at);
        before = from;
        if (before === 0) earlier.remove();
      } catch (err) {
        earlier.replaceWith(failure(err));
      } finally {
        earlier.disabled = false;
      }
    });
    if (target) {
      const shown = [...list.querySelectorAll('.msg')].find((m) => m.dataset.entry === first.messages.find((x) => x.id.startsWith(target))?.id);
      if (shown) {
        shown.classList.add('target');
        shown.scrollIntoView({ block: 'center' });
      }
    }
    main.dataset.state = 'ready';
    document.body.dataset.readyMs = String(Math.round(performance.now()));

    const load = async () => {
      if (loading || next === null) return;
      loading = true;
      try {
        add(await api(sessionApi(s.id, leaf, next)));
      } catch (err) {
        more.textContent = '';
        more.append(failure(err));
        next = null;
        main.dataset.more = 'no';
      } finally {
        loading = false;
      }
      // The observer speaks only when the sentinel's visibility changes: a
      // scroll that came while this page loaded, or a page too short to push
      // the sentinel out of view, would otherwise leave the rest unloaded.
      if (next !== null && more.getBoundingClientRect().top < innerHeight) load();
    };
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) load();
    }).observe(more);
  }

  function sessionApi(id, through, offset, entry, limit) {
    const q = new URLSearchParams({ offset: String(offset), limit: String(limit || PAGE) });
    if (through) q.set('through', through);
    if (entry) q.set('entry', entry);
    return '/api/sessions/' + encodeURIComponent(id) + '?' + q;
  }

  function roleLabel(m) {
    if (m.role === 'tool') return 'tool ' + (m.tool_name || '');
    if (m.role === 'invalid') return 'invalid line';
    return m.role;
  }

  function message(sessionId, m) {
    const role = ['user', 'assistant', 'tool', 'system', 'invalid'].includes(m.role) ? m.role : 'other';
    const art = el('article', { class: 'msg ' + role, data: { entry: m.id, n: String(m.n) } });
    art.append(el('header', null,
      el('span', { class: 'n' }, '#' + m.n),
      el('span', { class: 'who' }, roleLabel(m)),
      el('time', { dateTime: m.ts || '' }, when(m.ts))));
    const body = el('div', { class: 'body' });
    fillBody(body, m);
    art.append(body);
    if (m.truncated) {
      const btn = el('button', { type: 'button', class: 'whole' }, 'Show all (' + bytes(m.text_bytes) + ')');
      btn.addEventListener('click', async () => {
        btn.disabled = true;
        try {
          const whole = await api('/api/sessions/' + encodeURIComponent(sessionId) + '/entries/' + encodeURIComponent(m.id));
          clear(body);
          fillBody(body, whole, true);
          btn.remove();
        } catch (err) {
          btn.replaceWith(failure(err));
        }
      });
      art.append(btn);
    }
    if (m.forks.length) art.append(forkBox(sessionId, m.forks, 'The conversation branches here:'));
    return art;
  }

  function fillBody(body, m, open) {
    // Plain-text reasoning only: the server never sends encrypted reasoning.
    if (m.reasoning) {
      body.append(el('details', { class: 'thinking', open: !!open },
        el('summary', null, 'thinking'),
        el('pre', null, m.reasoning)));
    }
    if (m.role === 'invalid') {
      body.append(el('p', { class: 'fault' }, m.fault === 'not_utf8' ? 'Not valid UTF-8, kept as is:' : 'Not valid JSON, kept as is:'),
        el('pre', { class: 'raw' }, m.text));
    } else if (m.role === 'tool') {
      const d = el('details', { class: 'tool-out', open: !!open },
        el('summary', null, (m.tool_name || 'tool') + ' result · ' + bytes(m.text_bytes) + (m.truncated ? ' (cut)' : '')),
        el('pre', null, m.text));
      body.append(d);
    } else if (m.text) {
      body.append(markdown(m.text));
    }
    for (const c of m.tool_calls) {
      body.append(el('details', { class: 'call', open: !!open },
        el('summary', null, '→ ' + c.name + ' ',
          el('span', { class: 'args' }, c.arguments.length > 90 ? c.arguments.slice(0, 89) + '…' : c.arguments),
          ' · ' + bytes(new TextEncoder().encode(c.arguments).length)),
        el('pre', null, c.arguments)));
    }
  }

  function forkBox(sessionId, choices, label) {
    const box = el('nav', { class: 'fork' }, el('p', null, label));
    const ul = el('ul');
    choices.forEach((c, k) => {
      const text = 'Branch ' + (k + 1) + ' of ' + choices.length + ': ' + (c.preview || '(empty)') + ' (' + c.messages + ' messages' + (c.active ? ', active' : '') + ')';
      const item = c.current
        ? el('span', { class: 'choice current', data: { entry: c.entry } }, text)
        : el('a', { class: 'choice', href: viewUrl({ session: sessionId, through: c.entry }), data: { entry: c.entry } }, text);
      ul.append(el('li', null, item));
    });
    box.append(ul);
    return box;
  }

  // ---- The rewind dialog ------------------------------------------------
  // The checkpoints written while the session ran; undoing from one is
  // `evi rewind SEQ`: every write from it on, newest first. The plan is
  // shown first, and the confirm sends back its digest, so a journal that
  // changed meanwhile is refused and planned anew.

  function rewindBox(sessionId) {
    const open = el('button', { type: 'button', class: 'open-rewind' }, 'Rewind files…');
    const dialog = el('dialog', { class: 'rewind' });
    const body = el('div', { class: 'rewind-body' });
    const close = el('button', { type: 'button', class: 'close-rewind' }, 'Close');
    close.addEventListener('click', () => dialog.close());
    dialog.append(el('h2', null, 'Rewind files eVi wrote'), body, el('p', { class: 'rewind-foot' }, close));
    open.addEventListener('click', async () => {
      clear(body);
      dialog.dataset.state = 'loading';
      dialog.showModal();
      try {
        listCheckpoints(body, dialog, await api('/api/sessions/' + encodeURIComponent(sessionId) + '/checkpoints'));
      } catch (err) {
        body.append(failure(err));
        dialog.dataset.state = 'failed';
      }
    });
    return el('div', { class: 'rewind-box' }, open, dialog);
  }

  function cpText(c) {
    return '#' + c.seq + ' · ' + when(c.ts) + ' · ' + c.op + ' ';
  }

  function listCheckpoints(body, dialog, r) {
    body.append(el('p', { class: 'note' }, 'Checkpoints written during this session (' + when(r.span.start) + ' → ' + when(r.span.end) + '), newest first.'));
    const plan = el('div', { class: 'plan' });
    const ul = el('ul', { class: 'cps' });
    for (const c of r.checkpoints) {
      const li = el('li', { class: 'cp', data: { seq: String(c.seq) } }, cpText(c), el('code', null, c.path));
      if (c.not_restorable) li.append(el('span', { class: 'why' }, ' (cannot be undone: ' + c.not_restorable + ')'));
      const btn = el('button', { type: 'button', class: 'undo-from' }, 'Undo from here' + (c.undoes > 1 ? ' (' + c.undoes + ' writes)' : ''));
      btn.addEventListener('click', async () => {
        clear(plan);
        dialog.dataset.state = 'planning';
        try {
          showPlan(plan, dialog, await api('/api/rewind/plan?seq=' + c.seq));
        } catch (err) {
          plan.append(failure(err));
          dialog.dataset.state = 'failed';
        }
      });
      li.append(' ', btn);
      ul.append(li);
    }
    if (r.checkpoints.length) body.append(ul);
    else body.append(el('p', { class: 'note none' }, 'eVi wrote no file on this device while this session ran.'));
    if (r.pending_bytes > 0) body.append(el('p', { class: 'note' }, 'eVi is writing a checkpoint right now; a rewind waits until it is done.'));
    for (const d of r.devices) {
      const dl = el('ul', { class: 'cps device', data: { device: d.name } });
      for (const c of d.checkpoints) dl.append(el('li', { class: 'cp', data: { seq: String(c.seq) } }, cpText(c), el('code', null, c.path)));
      body.append(el('p', { class: 'note' }, 'On ' + d.name + ' (pulled; its paths are that device\'s, so it is listed only: `evi checkpoints restore` copies one here):'), dl);
    }
    body.append(plan);
    dialog.dataset.state = 'listed';
  }

  const ACTION = {
    restore: 'restore', delete: 'delete (eVi created it)', already_gone: 'already gone (eVi created it)',
    restored: '✓ restored', deleted: '✓ deleted (eVi created it)', failed: '✗ cannot undo',
  };

  function steps(p) {
    const ul = el('ul', { class: 'steps' });
    for (const st of p.steps) {
      ul.append(el('li', { class: 'step ' + st.action, data: { seq: String(st.seq), action: st.action } },
        ACTION[st.action] || st.action, ' ', el('code', null, st.path),
        st.why ? ' (' + st.why + ')' : '', el('span', { class: 'why' }, ' · #' + st.seq + ' ' + st.op)));
    }
    return ul;
  }

  function showPlan(box, dialog, p, note) {
    clear(box);
    if (note) box.append(note);
    const n = p.steps.length;
    box.append(el('p', { class: 'plan-head' }, 'Undoing from #' + p.seq + ' undoes ' + n + (n === 1 ? ' write' : ' writes') + ', newest first, as `evi rewind ' + p.seq + '` does:'), steps(p));
    if (p.failed) box.append(el('p', { class: 'note' }, p.failed + ' of them cannot be undone.'));
    const go = el('button', { type: 'button', class: 'confirm' }, 'Undo ' + p.undone + (p.undone === 1 ? ' write' : ' writes'));
    const cancel = el('button', { type: 'button', class: 'cancel' }, 'Cancel');
    cancel.addEventListener('click', () => {
      clear(box);
      dialog.dataset.state = 'listed';
    });
    go.addEventListener('click', async () => {
      go.disabled = true;
      cancel.disabled = true;
      dialog.dataset.state = 'undoing';
      try {
        const done = await api('/api/rewind', {
          method: 'POST',
          headers: { Accept: 'application/json', 'Content-Type': 'application/json', 'X-Evi-Csrf': csrf },
          body: JSON.stringify({ seq: p.seq, digest: p.digest }),
        });
        clear(box);
        box.append(el('p', { class: 'plan-head' }, 'Undid ' + done.undone + ' of ' + done.steps.length + (done.steps.length === 1 ? ' write' : ' writes') + '; ' + done.left + ' checkpoints left in the journal.'), steps(done));
        dialog.dataset.state = 'done';
      } catch (err) {
        if (err.body && err.body.code === 'plan_changed' && err.body.plan) {
          showPlan(box, dialog, err.body.plan, failure(err));
          dialog.dataset.state = 'replanned';
        } else {
          box.append(failure(err));
          dialog.dataset.state = 'failed';
        }
      }
    });
    box.append(el('p', { class: 'plan-buttons' }, go, ' ', cancel));
    dialog.dataset.state = 'planned';
  }

  function notHere(id, err) {
    document.title = 'evi session';
    main.dataset.state = 'failed';
    if (!(err instanceof ApiFailure) || err.body.code !== 'session_not_found' || !err.body.pull_available) {
      main.append(failure(err));
      return;
    }
    const status = el('p', { class: 'note' });
    const btn = el('button', { type: 'button', class: 'pull' }, 'Pull from the sync server');
    btn.addEventListener('click', async () => {
      btn.disabled = true;
      status.textContent = 'Pulling…';
      try {
        const r = await api('/api/pull', {
          method: 'POST',
          headers: { Accept: 'application/json', 'Content-Type': 'application/json', 'X-Evi-Csrf': csrf },
          body: JSON.stringify({ session: id }),
        });
        if (r.found) {
          location.assign(viewUrl({ session: r.found }));
        } else {
          status.textContent = 'Pulled ' + r.entries + ' entries; session ' + id + ' is still not on this device.';
          btn.disabled = false;
        }
      } catch (e) {
        status.textContent = '';
        status.append(failure(e));
        btn.disabled = false;
      }
    });
    main.append(failure(err, el('div', { class: 'pull-box' }, btn, status)));
  }

  // ---- Start -------------------------------------------------------------

  const session = params.get('session');
  (session ? showSession(session) : showList()).catch((err) => {
    clear(main);
    main.append(failure(err));
    main.dataset.state = 'failed';
  });
})();
