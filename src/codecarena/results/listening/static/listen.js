/* The listening test page of `codecarena listen` (docs/listening.md): MUSHRA after ITU-R BS.1534-3, or
   an A/B preference. Every stimulus of a trial is decoded into memory (Web Audio) and played from one
   playhead, so switching is seamless; a section may be looped. A trial is submitted only once every
   stimulus was played and every slider set. Orders come from the test's seed exactly as design.py
   draws them. Under the local server each answer is posted and written before the next trial; in a
   static bundle answers are kept in this browser and downloaded as a file at the end. The page's state
   is in window.listenState (the browser test reads it). */
'use strict';
(function () {
  var SAFE_ID = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$/;
  var REFERENCE = '__reference';
  var FADE_S = 0.01;
  var app = document.getElementById('app');
  var where = document.getElementById('where');
  var state = window.listenState = {screen: 'loading', error: '', listener: '', trial: '', position: null,
                                    order: [], plays: {}, heard: {}, touched: {}, ratings: {}, choice: null,
                                    referencePlays: 0, done: 0, total: 0};
  var manifest, listener, ctx, buffers = {}, engine = {playing: false, source: null, gain: null, cid: null,
                                                       startedAt: 0, offset: 0, lastTick: 0, start: 0, end: 0,
                                                       loop: false, duration: 0};
  var trial, startedAt, ui = {};

  // The listener's orders: design.py, bit for bit.
  function fnv1a32(text) {
    var h = 0x811c9dc5, bytes = new TextEncoder().encode(text);
    for (var i = 0; i < bytes.length; i++) { h ^= bytes[i]; h = Math.imul(h, 0x01000193) >>> 0; }
    return h >>> 0;
  }
  function mulberry32(a) {
    return function () {
      a |= 0; a = a + 0x6D2B79F5 | 0;
      var t = Math.imul(a ^ a >>> 15, 1 | a);
      t = t + Math.imul(t ^ t >>> 7, 61 | t) ^ t;
      return ((t ^ t >>> 14) >>> 0) / 4294967296;
    };
  }
  function shuffled(items, draw) {
    var out = items.slice();
    for (var i = out.length - 1; i > 0; i--) {
      var j = Math.floor(draw() * (i + 1)), x = out[i]; out[i] = out[j]; out[j] = x;
    }
    return out;
  }
  function plan() {
    var draw = mulberry32(fnv1a32(manifest.seed + ':' + listener));
    var order = shuffled(manifest.trials.map(function (t) { return t.id; }), draw);
    return order.map(function (id) { return {id: id, order: shuffled(manifest.conditions, draw)}; });
  }
  window.listenPlan = function () { return plan(); };

  function el(tag, attrs, text) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function fail(message) { state.error = message; var p = document.getElementById('error'); if (p) { p.textContent = message; } }
  function now() { return new Date().toISOString(); }

  // Answers kept in the browser (static bundle), by test and listener.
  function storeKey() { return 'codecarena-listen:' + manifest.test_sha256 + ':' + listener; }
  function stored() { try { return JSON.parse(localStorage.getItem(storeKey()) || '[]'); } catch (e) { return []; } }

  function progress() {
    if (manifest.mode === 'static') {
      var lines = stored();
      return Promise.resolve({trained: lines.some(function (l) { return l.kind === 'training'; }),
                              answered: lines.filter(function (l) { return l.kind !== 'training'; })
                                .map(function (l) { return l.trial; })});
    }
    return fetch('api/progress?listener=' + encodeURIComponent(listener)).then(function (r) {
      return r.json().then(function (body) { if (!r.ok) { throw new Error(body.error); } return body; });
    });
  }

  function send(answer) {
    if (manifest.mode === 'static') {
      var lines = stored(); lines.push(answer);
      localStorage.setItem(storeKey(), JSON.stringify(lines));
      return Promise.resolve();
    }
    return fetch('api/answer', {method: 'POST', headers: {'Content-Type': 'application/json'},
                                body: JSON.stringify(answer)}).then(function (r) {
      if (!r.ok) { return r.json().then(function (body) { throw new Error(body.error || ('HTTP ' + r.status)); }); }
    });
  }

  // Audio: every stimulus decoded once; one source plays at a time from the shared playhead.
  function load(shas) {
    ctx = ctx || new AudioContext();
    return Promise.all(shas.filter(function (s) { return !buffers[s]; }).map(function (sha) {
      return fetch(manifest.audio[sha]).then(function (r) {
        if (!r.ok) { throw new Error('stimulus ' + sha.slice(0, 12) + ': HTTP ' + r.status); }
        return r.arrayBuffer();
      }).then(function (data) { return ctx.decodeAudioData(data); }).then(function (b) { buffers[sha] = b; });
    }));
  }
  function position() {
    if (!engine.playing) { return engine.offset; }
    var p = engine.offset + (ctx.currentTime - engine.startedAt);
    if (engine.loop && p >= engine.end) { p = engine.start + (p - engine.start) % (engine.end - engine.start); }
    return Math.min(p, engine.end);
  }
  function account() {
    if (engine.playing && engine.cid) {
      var t = ctx.currentTime;
      if (engine.cid !== REFERENCE) { state.heard[engine.cid] += t - engine.lastTick; }
      engine.lastTick = t;
    }
  }
  function release(at) {
    if (!engine.source) { return; }
    var old = engine.source, gain = engine.gain;
    old.onended = null;
    gain.gain.setValueAtTime(1, at); gain.gain.linearRampToValueAtTime(0, at + FADE_S);
    old.stop(at + FADE_S);
    engine.source = null;
  }
  function play(cid) {
    if (ctx.state === 'suspended') { ctx.resume(); }
    account();
    var at = engine.playing ? position() : engine.offset;
    if (at < engine.start || at >= engine.end - 0.005) { at = engine.start; }
    var t = ctx.currentTime, sha = cid === REFERENCE ? trial.reference : trial.stimuli[cid];
    release(t);
    var src = ctx.createBufferSource(), gain = ctx.createGain();
    src.buffer = buffers[sha];
    src.connect(gain); gain.connect(ctx.destination);
    gain.gain.setValueAtTime(0, t); gain.gain.linearRampToValueAtTime(1, t + FADE_S);
    if (engine.loop) { src.loop = true; src.loopStart = engine.start; src.loopEnd = engine.end; src.start(t, at); }
    else { src.start(t, at, engine.end - at); }
    src.onended = function () {
      if (engine.source !== src) { return; }
      account(); engine.playing = false; engine.source = null; engine.offset = engine.start; refresh();
    };
    engine.source = src; engine.gain = gain; engine.cid = cid; engine.startedAt = t; engine.offset = at;
    engine.lastTick = t; engine.playing = true;
    if (cid === REFERENCE) { state.referencePlays += 1; } else { state.plays[cid] += 1; }
    refresh();
  }
  function stop() {
    account();
    var at = position();
    release(ctx.currentTime);
    engine.playing = false; engine.offset = at >= engine.end ? engine.start : at;
    refresh();
  }
  function restart() { if (engine.playing) { play(engine.cid); } }

  function needed() { return Math.min(manifest.min_heard_s, trial.duration_s); }
  function played(cid) { return state.plays[cid] > 0 && state.heard[cid] >= needed(); }
  function missing() {
    var out = [];
    state.order.forEach(function (cid, i) {
      if (!played(cid)) { out.push('play ' + ui.names[cid]); }
      else if (state.kind === 'mushra' && !state.touched[cid]) { out.push('rate ' + ui.names[cid]); }
    });
    if (state.kind === 'ab' && state.choice === null) { out.push('choose'); }
    return out;
  }
  function refresh() {
    if (!ui.submit) { return; }
    state.order.forEach(function (cid) {
      var box = ui.columns[cid];
      box.dataset.played = played(cid) ? 'true' : 'false';
      box.querySelector('.flag').textContent = played(cid) ? 'played' : 'not played yet';
      box.querySelector('button').classList.toggle('active', engine.playing && engine.cid === cid);
    });
    ui.reference.classList.toggle('active', engine.playing && engine.cid === REFERENCE);
    ui.stop.disabled = !engine.playing;
    ui.position.value = position().toFixed(2);
    var left = missing();
    ui.submit.disabled = left.length > 0;
    ui.missing.textContent = left.length ? 'Still to do: ' + left.join(', ') + '.' : 'Ready to submit.';
  }

  function transport(duration) {
    engine.start = 0; engine.end = duration; engine.offset = 0; engine.loop = false; engine.duration = duration;
    var bar = el('div', {'class': 'transport'});
    ui.reference = el('button', {type: 'button', id: 'play-reference'}, 'Reference');
    ui.reference.addEventListener('click', function () { play(REFERENCE); });
    ui.stop = el('button', {type: 'button', id: 'stop'}, 'Stop');
    ui.stop.addEventListener('click', stop);
    ui.position = el('input', {type: 'range', min: '0', max: duration.toFixed(2), step: '0.01', value: '0',
                               'aria-label': 'playhead'});
    ui.position.addEventListener('input', function () {
      engine.offset = Math.min(Math.max(parseFloat(ui.position.value), engine.start), engine.end);
      restart();
    });
    var loop = el('input', {type: 'checkbox', id: 'loop'});
    loop.addEventListener('change', function () { engine.loop = loop.checked; restart(); });
    var from = el('button', {type: 'button'}, 'section starts here');
    var to = el('button', {type: 'button'}, 'section ends here');
    var whole = el('button', {type: 'button'}, 'whole');
    ui.section = el('span', {'class': 'note'});
    function section(start, end) {
      if (end - start < 0.1) { return; }
      engine.start = start; engine.end = end; engine.offset = start;
      ui.section.textContent = 'section ' + start.toFixed(2) + '-' + end.toFixed(2) + ' s';
      restart();
    }
    from.addEventListener('click', function () { section(position(), engine.end); });
    to.addEventListener('click', function () { section(engine.start, position()); });
    whole.addEventListener('click', function () { section(0, duration); });
    var loopLabel = el('label'); loopLabel.appendChild(loop); loopLabel.appendChild(document.createTextNode(' loop'));
    [ui.reference, ui.stop, ui.position, loopLabel, from, to, whole, ui.section].forEach(function (n) { bar.appendChild(n); });
    section(0, duration);
    return bar;
  }

  function show(kind, current, position, order, names, title, intro) {
    trial = current; state.kind = kind; state.trial = current.id; state.order = order; state.position = position;
    state.plays = {}; state.heard = {}; state.touched = {}; state.ratings = {}; state.choice = null;
    state.referencePlays = 0; startedAt = now(); ui = {names: names, columns: {}};
    order.forEach(function (cid) { state.plays[cid] = 0; state.heard[cid] = 0; });
    app.textContent = '';
    app.appendChild(el('h2', {}, title));
    app.appendChild(el('p', {'class': 'note'}, intro));
    app.appendChild(transport(current.duration_s));
    var board = el('div', {'class': kind === 'training' ? 'training' : 'board'});
    if (kind === 'mushra') {
      var scale = el('div', {'class': 'scale'});
      ['Excellent', 'Good', 'Fair', 'Poor', 'Bad'].forEach(function (word, i) {
        scale.appendChild(el('span', {}, word + ' ' + (80 - 20 * i) + '-' + (100 - 20 * i)));
      });
      board.appendChild(scale);
    }
    order.forEach(function (cid) {
      var box = el('div', {'class': 'stimulus', 'data-cid': cid});
      var button = el('button', {type: 'button', 'data-cid': cid}, names[cid]);
      button.addEventListener('click', function () { play(cid); });
      box.appendChild(button);
      if (kind === 'mushra') {
        var slider = el('input', {type: 'range', min: '0', max: '100', step: '1', value: '0', 'class': 'rating',
                                  'data-cid': cid, 'aria-label': 'rating of ' + names[cid]});
        var value = el('span', {'class': 'value'}, '-');
        slider.addEventListener('input', function () {
          state.touched[cid] = true; state.ratings[cid] = parseInt(slider.value, 10); value.textContent = slider.value;
          refresh();
        });
        box.appendChild(slider); box.appendChild(value);
      }
      box.appendChild(el('span', {'class': 'flag'}, 'not played yet'));
      ui.columns[cid] = box; board.appendChild(box);
    });
    app.appendChild(board);
    if (kind === 'ab') {
      var choices = el('div', {'class': 'choices'});
      var options = order.map(function (cid) { return [cid, names[cid] + ' is better']; });
      if (manifest.no_preference) { options.push([manifest.no_preference_id, 'no preference']); }
      options.forEach(function (o) {
        var label = el('label'), radio = el('input', {type: 'radio', name: 'choice', value: o[0]});
        radio.addEventListener('change', function () { state.choice = o[0]; refresh(); });
        label.appendChild(radio); label.appendChild(document.createTextNode(' ' + o[1])); choices.appendChild(label);
      });
      app.appendChild(choices);
    }
    ui.missing = el('p', {'class': 'missing', id: 'missing'});
    ui.submit = el('button', {type: 'button', id: 'submit', 'class': 'primary'},
                   kind === 'training' ? 'Start the test' : 'Submit and go on');
    ui.submit.addEventListener('click', submit);
    app.appendChild(ui.missing); app.appendChild(ui.submit); app.appendChild(el('p', {'class': 'error', id: 'error'}));
    state.screen = kind === 'training' ? 'training' : 'trial';
    refresh();
  }

  function submit() {
    if (missing().length) { return; }
    if (engine.playing) { stop(); }
    ui.submit.disabled = true;
    var stimuli = {};
    state.order.forEach(function (cid) { stimuli[cid] = trial.stimuli[cid]; });
    var heard = {};
    state.order.forEach(function (cid) { heard[cid] = Math.round(state.heard[cid] * 1000) / 1000; });
    var answer = {test_sha256: manifest.test_sha256, listener: listener, kind: state.kind, trial: trial.id,
                  position: state.kind === 'training' ? null : state.position, order: state.order,
                  stimuli: stimuli, ratings: state.kind === 'mushra' ? state.ratings : {},
                  choice: state.kind === 'ab' ? state.choice : null, plays: state.plays, heard_s: heard,
                  reference_plays: state.referencePlays, started_at: startedAt, submitted_at: now()};
    send(answer).then(next, function (e) { fail('Not accepted: ' + e.message); ui.submit.disabled = false; });
  }

  function next() {
    // Nothing of the page is the next trial's until show() has built it.
    state.error = ''; state.screen = 'loading';
    return progress().then(function (p) {
      var steps = plan();
      state.done = p.answered.length; state.total = steps.length;
      where.textContent = 'Test ' + manifest.test + ' · listener ' + listener +
        (p.trained ? ' · ' + Math.min(state.done + 1, state.total) + ' of ' + state.total : ' · training');
      if (!p.trained) {
        var t = manifest.training;
        return load([t.reference].concat(manifest.conditions.map(function (c) { return t.stimuli[c]; }))).then(function () {
          show('training', t, null, manifest.conditions, manifest.training_labels, 'Training',
               'Listen to the reference and to every example: they show the range of quality you will rate. ' +
               'Nothing is rated here. Play each one, then start the test.');
        });
      }
      if (state.done >= steps.length) { return finish(); }
      var step = steps[state.done], t = manifest.trials.filter(function (x) { return x.id === step.id; })[0];
      var names = {}, position = state.done;
      step.order.forEach(function (cid, i) { names[cid] = String.fromCharCode(65 + i); });
      return load([t.reference].concat(step.order.map(function (c) { return t.stimuli[c]; }))).then(function () {
        show(manifest.kind, t, position, step.order, names, 'Trial ' + (position + 1) + ' of ' + steps.length,
             manifest.kind === 'mushra'
               ? 'Rate the quality of each stimulus against the reference, 0 to 100. One of them is the reference ' +
                 'itself. Switch freely between them while they play; loop a section to compare details.'
               : 'Which of the two sounds better? The reference is there to compare with.');
      });
    }).catch(function (e) { fail(e.message); });
  }

  function finish() {
    state.screen = 'done'; app.textContent = '';
    app.appendChild(el('h2', {}, 'Thank you'));
    if (manifest.mode === 'static') {
      app.appendChild(el('p', {}, 'Your answers are kept in this browser. Download them and send the file to ' +
                                  'the person who gave you this test.'));
      var button = el('button', {type: 'button', id: 'download', 'class': 'primary'}, 'Download my answers');
      button.addEventListener('click', function () {
        var text = stored().map(function (l) { return JSON.stringify(l); }).join('\n') + '\n';
        var a = el('a', {href: URL.createObjectURL(new Blob([text], {type: 'application/x-ndjson'})),
                         download: 'ratings-' + manifest.test + '-' + listener + '.jsonl'});
        document.body.appendChild(a); a.click(); a.remove();
      });
      app.appendChild(button);
    } else {
      app.appendChild(el('p', {}, 'Every answer is recorded. You may close this page.'));
    }
  }

  function ask() {
    state.screen = 'listener'; app.textContent = '';
    var form = el('form', {'class': 'listener'});
    var input = el('input', {name: 'listener', id: 'listener', required: '', autocomplete: 'off',
                             placeholder: 'letters, digits, . _ -'});
    form.appendChild(el('label', {'for': 'listener'}, 'Your listener id: '));
    form.appendChild(input); form.appendChild(el('button', {type: 'submit'}, 'Start'));
    form.appendChild(el('p', {'class': 'error', id: 'error'}));
    form.addEventListener('submit', function (ev) {
      ev.preventDefault();
      if (!SAFE_ID.test(input.value)) { fail('A listener id is letters, digits, ".", "_" and "-", not starting with a dot.'); return; }
      var url = new URL(location.href); url.searchParams.set('listener', input.value);
      history.replaceState(null, '', url); begin(input.value);
    });
    app.appendChild(form);
  }

  function begin(id) { listener = id; state.listener = id; next(); }

  document.addEventListener('keydown', function (ev) {
    if (state.screen !== 'trial' && state.screen !== 'training') { return; }
    if (ev.target && ev.target.tagName === 'INPUT' && ev.target.type !== 'range') { return; }
    if (ev.key === ' ') { ev.preventDefault(); if (engine.playing) { stop(); } else if (engine.cid) { play(engine.cid); } }
    else if (ev.key === 'r' || ev.key === 'R') { play(REFERENCE); }
    else if (/^[1-9]$/.test(ev.key) && state.order[parseInt(ev.key, 10) - 1]) { play(state.order[parseInt(ev.key, 10) - 1]); }
  });
  setInterval(function () { if (engine.playing) { account(); refresh(); } }, 100);

  fetch('manifest.json').then(function (r) { return r.json(); }).then(function (m) {
    manifest = m;
    document.title = 'Listening test ' + m.test;
    var id = new URL(location.href).searchParams.get('listener');
    if (id && SAFE_ID.test(id)) { begin(id); } else { ask(); }
  }).catch(function (e) { app.textContent = 'The test could not be loaded: ' + e.message; state.error = e.message; });
}());
