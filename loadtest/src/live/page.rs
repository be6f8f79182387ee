//! The live page: one document with its script inline (allowed by hash, like `report.html`'s),
//! which opens the server-sent events and draws what they say. It asks the server nothing
//! else, but "Next" in the teaching mode.

use maud::{Markup, html};

use crate::report::html::page::document;

/// Applies each server-sent event to the page: the phase, the sale's figures, the counters,
/// the charts (answers per second by code, latency percentiles per second), the timeline.
pub const SCRIPT: &str = r#"
(function () {
  var $ = function (id) { return document.getElementById(id); };
  var NS = 'http://www.w3.org/2000/svg';
  var seconds = [];
  var colours = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f'];
  var labels = [];
  var status = function (state, text) { var s = $('status'); s.setAttribute('data-state', state); s.textContent = text; };
  var set = function (id, value) { var e = $(id); e.textContent = String(value); e.setAttribute('data-value', String(value)); };
  var svg = function (name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(e); }
    return e;
  };
  var chart = function (id, series, log) {
    var box = $(id); while (box.firstChild) { box.removeChild(box.firstChild); }
    var W = 560, H = 220, L = 56, B = 24;
    var shown = seconds.slice(-120);
    if (!shown.length) { return; }
    var t0 = shown[0].t, t1 = Math.max(shown[shown.length - 1].t, t0 + 1);
    var max = 1;
    series.forEach(function (s) { shown.forEach(function (p) { max = Math.max(max, s.value(p) || 0); }); });
    var y = function (v) {
      var f = log ? Math.log10(Math.max(v, 1)) / Math.log10(Math.max(max, 10)) : v / max;
      return H - B - f * (H - B - 8);
    };
    var x = function (t) { return L + (W - L - 8) * (t - t0) / (t1 - t0); };
    svg('line', { x1: L, x2: W - 8, y1: H - B, y2: H - B, stroke: '#999' }, box);
    svg('text', { x: L - 4, y: 14, 'text-anchor': 'end' }, box).textContent = String(Math.round(max));
    svg('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, box).textContent = log ? '1' : '0';
    svg('text', { x: L, y: H - 6 }, box).textContent = t0 + ' s';
    svg('text', { x: W - 8, y: H - 6, 'text-anchor': 'end' }, box).textContent = t1 + ' s';
    series.forEach(function (s, k) {
      var points = shown.filter(function (p) { return s.value(p) !== undefined; })
        .map(function (p) { return x(p.t).toFixed(1) + ',' + y(s.value(p)).toFixed(1); });
      svg('polyline', { points: points.join(' '), fill: 'none', stroke: s.colour, 'stroke-width': 2, 'data-series': s.name }, box);
      svg('text', { x: W - 12, y: 16 + 14 * k, 'text-anchor': 'end', fill: s.colour }, box).textContent = s.name;
    });
  };
  var redraw = function () {
    chart('rates', labels.map(function (label, k) {
      return { name: label + '/s', colour: colours[k % colours.length],
               value: function (p) { return p.counts[label] ? p.counts[label] / p.span : 0; } };
    }), false);
    chart('latency', ['p50', 'p90', 'p99'].map(function (q, k) {
      return { name: q + ' µs', colour: colours[k], value: function (p) { return p[q + '_us']; } };
    }), true);
  };
  var codes = function (counts) {
    var body = $('codes'); while (body.firstChild) { body.removeChild(body.firstChild); }
    Object.keys(counts).forEach(function (label) {
      var row = body.insertRow(); row.setAttribute('data-code', label);
      row.insertCell().textContent = label;
      var n = row.insertCell(); n.className = 'num'; n.textContent = counts[label];
    });
  };
  var events = new EventSource('/events');
  events.onopen = function () { status('connected', 'connected'); };
  events.onerror = function () { if ($('status').getAttribute('data-state') !== 'finished') { status('lost', 'connection lost'); } };
  events.addEventListener('phase', function (e) {
    var d = JSON.parse(e.data);
    set('subject', d.subject); set('what', d.what); codes({});
  });
  events.addEventListener('second', function (e) {
    var d = JSON.parse(e.data);
    Object.keys(d.counts).forEach(function (l) { if (labels.indexOf(l) < 0) { labels.push(l); } });
    seconds.push(d);
    set('answers', d.answers);
    set('per-second', Math.round(Object.keys(d.counts).reduce(function (n, l) { return n + d.counts[l]; }, 0) / d.span));
    set('p99', (d.p99_us / 1000).toFixed(1));
    if ($('sale').getAttribute('data-state') === 'selling') { set('acknowledged', d.phase_counts.created || 0); }
    codes(d.phase_counts);
    redraw();
  });
  events.addEventListener('sale', function (e) {
    var d = JSON.parse(e.data);
    $('sale').setAttribute('data-state', 'selling');
    set('sale-strategy', d.strategy); set('stock', d.stock); set('acknowledged', 0);
    ['final-stock', 'units-sold', 'orders', 'oversell', 'lost-updates', 'undersell'].forEach(function (id) { set(id, '…'); });
  });
  var FIELDS = ['final_stock', 'units_sold', 'orders', 'oversell', 'lost_updates', 'negative_stock', 'undersell'];
  events.addEventListener('sale-done', function (e) {
    var d = JSON.parse(e.data), a = d.accounting;
    $('sale').setAttribute('data-state', 'done');
    set('acknowledged', d.outcomes.created || 0);
    set('final-stock', a.final_stock); set('units-sold', a.units_sold); set('orders', a.orders);
    set('oversell', a.oversell); set('lost-updates', a.lost_updates); set('undersell', a.undersell);
    $('oversell').className = a.oversell > 0 ? 'big bad' : 'big';
    var row = $('sales').insertRow(); row.setAttribute('data-strategy', d.strategy);
    row.insertCell().textContent = d.strategy;
    FIELDS.forEach(function (f) {
      var c = row.insertCell(); c.className = 'num'; c.setAttribute('data-field', f); c.textContent = a[f];
      if ((f === 'oversell' || f === 'lost_updates' || f === 'negative_stock') && a[f] > 0) { c.className = 'num bad'; }
    });
  });
  events.addEventListener('event', function (e) {
    var d = JSON.parse(e.data);
    var row = $('events').insertRow();
    row.insertCell().textContent = d.scenario;
    var t = row.insertCell(); t.className = 'num'; t.textContent = Math.round(d.t_ms);
    row.insertCell().textContent = d.actor;
    row.insertCell().textContent = d.what;
    set('event-count', $('events').rows.length);
    var box = $('timeline-box'); box.scrollTop = box.scrollHeight;
  });
  events.addEventListener('paused', function (e) {
    var waiting = JSON.parse(e.data).waiting;
    $('step').hidden = !waiting; $('next').disabled = !waiting;
  });
  events.addEventListener('missed', function (e) { set('missed', JSON.parse(e.data).updates); });
  events.addEventListener('finished', function (e) {
    var d = JSON.parse(e.data);
    status('finished', 'finished' + (d.report ? ': ' + d.report : ''));
    events.close();
  });
  $('next').addEventListener('click', function () {
    $('next').disabled = true;
    fetch('/next', { method: 'POST' });
  });
})();
"#;

/// The page.
pub fn render() -> String {
    document("seckill-bench live", body(), &[SCRIPT], Some("'self'")).into_string()
}

fn body() -> Markup {
    html! {
        h1 { "seckill-bench, live " small #status data-state="connecting" { "connecting" } }
        p.phase { strong #subject { "–" } " · " span #what { "waiting for the run" } }
        div #step.warning hidden {
            "The scenario waits after this event. "
            button #next disabled { "Next" }
        }
        section #sale data-state="none" {
            h2 { "Flash sale of " code #sale-strategy { "–" } }
            div.counters {
                div { span.label { "stock on sale" } span.big #stock { "–" } }
                div { span.label { "told they bought (201)" } span.big #acknowledged { "–" } }
                div { span.label { "stock counter at the end" } span.big #final-stock { "–" } }
                div { span.label { "units in orders" } span.big #units-sold { "–" } }
                div { span.label { "orders" } span.big #orders { "–" } }
                div { span.label { "oversell" } span.big #oversell { "–" } }
                div { span.label { "lost updates" } span.big #lost-updates { "–" } }
                div { span.label { "undersell" } span.big #undersell { "–" } }
            }
            p.note { "The buyers' answers are counted as they come; the database's figures are \
                      read when the sale is over, as the report stores them." }
        }
        section {
            h2 { "Answers" }
            div.counters {
                div { span.label { "answers in the run" } span.big #answers data-value="0" { "0" } }
                div { span.label { "answers/s, last second" } span.big #per-second { "–" } }
                div { span.label { "p99 ms, last second" } span.big #p99 { "–" } }
                div { span.label { "updates missed" } span.big #missed data-value="0" { "0" } }
            }
            table { thead { tr { th { "this phase, by code" } th { "answers" } } } tbody #codes {} }
            div.charts {
                figure { figcaption { "Answers per second, by code" } svg #rates width="560" height="220" {} }
                figure { figcaption { "Latency percentiles per second (µs, log scale)" } svg #latency width="560" height="220" {} }
            }
        }
        section {
            h2 { "Sales so far (the database's accounting)" }
            table #sales-table {
                thead { tr {
                    th { "strategy" } th { "final stock" } th { "units sold" } th { "orders" }
                    th { "oversell" } th { "lost updates" } th { "negative stock" } th { "undersell" }
                } }
                tbody #sales {}
            }
        }
        section {
            h2 { "Scenario timeline (" span #event-count { "0" } " events)" }
            div #timeline-box style="max-height: 420px; overflow-y: auto;" {
                table { thead { tr { th { "scenario" } th { "t (ms)" } th { "who" } th { "what" } } } tbody #events {} }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_may_connect_only_to_its_own_server() {
        let page = render();
        assert!(page.contains("connect-src 'self'"), "{page}");
        assert!(page.contains("default-src 'none'"), "{page}");
        for id in [
            "stock",
            "acknowledged",
            "oversell",
            "answers",
            "rates",
            "latency",
            "events",
            "next",
        ] {
            assert!(page.contains(&format!("id=\"{id}\"")), "no #{id}");
        }
    }
}
