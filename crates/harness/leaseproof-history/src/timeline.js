// The timeline page's script: plain JavaScript, inlined in the page, no
// network. Why it exists: a run of minutes with events microseconds apart
// does not fit one width; the reader zooms to where the violation is.
//
// - Hovering a violation outlines the events and rows that prove it;
//   clicking it zooms to them.
// - The wheel zooms about the pointer, a drag pans; the buttons and the
//   keys + - 0 ← → do the same.
// - The view lives in the page's address (#t=FROM..TO, µs from the first
//   event), so a zoomed view can be shared and reopened.
//
// Method: the page is drawn by the server side at zoom 1; this script keeps
// every mark's original position and maps it linearly onto the visible
// window, redrawing the ticks for it. Marks of one instant (rows, faults,
// labels) keep their size; intervals stretch.
(function () {
  'use strict';
  var svg = document.getElementById('timeline');
  if (!svg) {
    return;
  }
  var SVG_NS = 'http://www.w3.org/2000/svg';
  var axisX = Number(svg.getAttribute('data-axis-x'));
  var axisWidth = Number(svg.getAttribute('data-axis-width'));
  var spanUs = Math.max(1, Number(svg.getAttribute('data-span-us')));
  // The narrowest window: ten microseconds (or the whole run, if shorter).
  var narrowestUs = Math.min(spanUs, 10);
  var STEPS_US = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4,
    1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7, 3e7, 6e7, 3e8, 6e8, 3.6e9];

  // Every mark's original geometry, in document order (a bar's rect comes
  // before its label, so a label can follow its bar).
  var items = [];
  var itemOf = new Map();
  svg.querySelectorAll('g.plot rect, g.plot text, g.plot path').forEach(function (element) {
    var item = { element: element };
    if (element.tagName === 'path') {
      var match = /^M(-?[\d.]+),(-?[\d.]+)(.*)$/.exec(element.getAttribute('d') || '');
      if (!match) {
        return;
      }
      item.x = Number(match[1]);
      item.y = match[2];
      item.rest = match[3];
    } else {
      item.x = Number(element.getAttribute('x'));
      if (element.tagName === 'rect') {
        item.width = Number(element.getAttribute('width'));
        item.instant = element.classList.contains('row');
      } else {
        var bar = itemOf.get(element.previousElementSibling);
        if (bar && bar.width !== undefined) {
          item.bar = bar;
          item.dx = item.x - bar.x;
        }
      }
    }
    items.push(item);
    itemOf.set(element, item);
  });

  var ticks = document.getElementById('ticks');
  var firstTick = ticks ? ticks.querySelector('line') : null;
  var tickTop = firstTick ? firstTick.getAttribute('y1') : '24';
  var tickBottom = firstTick ? firstTick.getAttribute('y2') : svg.getAttribute('height');
  var firstLabel = ticks ? ticks.querySelector('text') : null;
  var labelY = firstLabel ? firstLabel.getAttribute('y') : '20';

  var view = { from: 0, to: spanUs };

  // An x of the page as drawn (zoom 1) to the x of the current view.
  function place(x) {
    var us = ((x - axisX) / axisWidth) * spanUs;
    return axisX + ((us - view.from) / (view.to - view.from)) * axisWidth;
  }

  function xToUs(x) {
    return view.from + ((x - axisX) / axisWidth) * (view.to - view.from);
  }

  function pad3(n) {
    return ('00' + n).slice(-3);
  }

  // As the page's own labels: +12 µs, +1.500 ms, +2.000 s.
  function formatUs(us) {
    us = Math.round(us);
    if (us >= 1e6) {
      return '+' + Math.floor(us / 1e6) + '.' + pad3(Math.floor((us % 1e6) / 1e3)) + ' s';
    }
    if (us >= 1e3) {
      return '+' + Math.floor(us / 1e3) + '.' + pad3(us % 1e3) + ' ms';
    }
    return '+' + us + ' µs';
  }

  function drawTicks() {
    if (!ticks) {
      return;
    }
    while (ticks.firstChild) {
      ticks.removeChild(ticks.firstChild);
    }
    var widthUs = view.to - view.from;
    var step = STEPS_US.find(function (candidate) {
      return widthUs / candidate <= 12;
    }) || STEPS_US[STEPS_US.length - 1];
    for (var at = Math.ceil(view.from / step) * step; at <= view.to; at += step) {
      if (at <= 0) {
        continue;
      }
      var x = (axisX + ((at - view.from) / widthUs) * axisWidth).toFixed(1);
      var line = document.createElementNS(SVG_NS, 'line');
      line.setAttribute('class', 'tick');
      line.setAttribute('x1', x);
      line.setAttribute('x2', x);
      line.setAttribute('y1', tickTop);
      line.setAttribute('y2', tickBottom);
      var label = document.createElementNS(SVG_NS, 'text');
      label.setAttribute('class', 'tick-label');
      label.setAttribute('x', x);
      label.setAttribute('y', labelY);
      label.textContent = formatUs(at);
      ticks.appendChild(line);
      ticks.appendChild(label);
    }
  }

  function draw() {
    var stretch = spanUs / (view.to - view.from);
    items.forEach(function (item) {
      var element = item.element;
      if (item.rest !== undefined) {
        element.setAttribute('d', 'M' + place(item.x).toFixed(1) + ',' + item.y + item.rest);
      } else if (item.bar) {
        element.setAttribute('x', (place(item.bar.x) + item.dx).toFixed(1));
      } else if (item.width === undefined) {
        element.setAttribute('x', place(item.x).toFixed(1));
      } else if (item.instant) {
        element.setAttribute('x', (place(item.x + item.width / 2) - item.width / 2).toFixed(1));
      } else {
        element.setAttribute('x', place(item.x).toFixed(1));
        element.setAttribute('width', (item.width * stretch).toFixed(1));
      }
    });
    drawTicks();
    var caption = formatUs(view.from) + ' to ' + formatUs(view.to) +
      ' (×' + stretch.toFixed(stretch < 10 ? 1 : 0) + ')';
    svg.setAttribute('data-view', Math.round(view.from) + '..' + Math.round(view.to));
    var shown = document.getElementById('zoom-window');
    if (shown) {
      shown.textContent = caption;
    }
  }

  function show(fromUs, toUs) {
    if (!(toUs > fromUs)) {
      return;
    }
    var widthUs = Math.min(spanUs, Math.max(narrowestUs, toUs - fromUs));
    var middle = (fromUs + toUs) / 2;
    var from = Math.max(0, Math.min(middle - widthUs / 2, spanUs - widthUs));
    view.from = from;
    view.to = from + widthUs;
    draw();
    var whole = view.from <= 0 && view.to >= spanUs;
    var address = whole ? location.pathname + location.search
      : '#t=' + Math.round(view.from) + '..' + Math.round(view.to);
    try {
      history.replaceState(null, '', address);
    } catch (error) {
      // Some file:// pages refuse it; the view still works.
    }
  }

  function zoom(factor, aboutUs) {
    var at = aboutUs === undefined ? (view.from + view.to) / 2 : aboutUs;
    show(at - (at - view.from) * factor, at + (view.to - at) * factor);
  }

  function pan(fraction) {
    var byUs = (view.to - view.from) * fraction;
    show(view.from + byUs, view.to + byUs);
  }

  // The x of a pointer event in the SVG's own coordinates.
  function pointerX(event) {
    var box = svg.getBoundingClientRect();
    return (event.clientX - box.left) * (svg.viewBox.baseVal.width / box.width);
  }

  svg.addEventListener('wheel', function (event) {
    var x = pointerX(event);
    if (x < axisX) {
      return;
    }
    event.preventDefault();
    zoom(event.deltaY < 0 ? 0.8 : 1.25, xToUs(x));
  }, { passive: false });

  var drag = null;
  svg.addEventListener('mousedown', function (event) {
    if (event.button !== 0) {
      return;
    }
    drag = { x: pointerX(event), from: view.from, to: view.to };
    event.preventDefault();
  });
  window.addEventListener('mousemove', function (event) {
    if (!drag) {
      return;
    }
    var byUs = ((pointerX(event) - drag.x) / axisWidth) * (drag.to - drag.from);
    show(drag.from - byUs, drag.to - byUs);
  });
  window.addEventListener('mouseup', function () {
    drag = null;
  });

  document.querySelectorAll('[data-zoom]').forEach(function (button) {
    button.addEventListener('click', function () {
      var action = button.getAttribute('data-zoom');
      if (action === 'in') {
        zoom(0.5);
      } else if (action === 'out') {
        zoom(2);
      } else if (action === 'left') {
        pan(-0.25);
      } else if (action === 'right') {
        pan(0.25);
      } else {
        show(0, spanUs);
      }
    });
  });

  document.addEventListener('keydown', function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    var keys = { '+': [zoom, 0.5], '=': [zoom, 0.5], '-': [zoom, 2],
      ArrowLeft: [pan, -0.25], ArrowRight: [pan, 0.25] };
    if (event.key === '0') {
      show(0, spanUs);
    } else if (keys[event.key]) {
      keys[event.key][0](keys[event.key][1]);
    } else {
      return;
    }
    event.preventDefault();
  });

  // The time span (µs, zoom 1) of the marks inside an element.
  function spanOf(element) {
    var span = null;
    items.forEach(function (item) {
      if (item.bar || !element.contains(item.element)) {
        return;
      }
      var from = ((item.x - axisX) / axisWidth) * spanUs;
      var to = ((item.x + (item.width || 0) - axisX) / axisWidth) * spanUs;
      span = span ? { from: Math.min(span.from, from), to: Math.max(span.to, to) } : { from: from, to: to };
    });
    return span;
  }

  document.querySelectorAll('.violation-item').forEach(function (entry) {
    var ids = (entry.getAttribute('data-targets') || '').split(' ').filter(function (id) {
      return id.length > 0;
    });
    function mark(on) {
      ids.forEach(function (id) {
        var element = document.getElementById(id);
        if (element) {
          element.classList.toggle('hl', on);
        }
      });
    }
    entry.addEventListener('mouseenter', function () {
      mark(true);
    });
    entry.addEventListener('mouseleave', function () {
      mark(false);
    });
    entry.addEventListener('click', function () {
      var evidence = null;
      ids.forEach(function (id) {
        var element = document.getElementById(id);
        var span = element ? spanOf(element) : null;
        if (span) {
          evidence = evidence
            ? { from: Math.min(evidence.from, span.from), to: Math.max(evidence.to, span.to) }
            : span;
        }
      });
      if (evidence) {
        var margin = Math.max((evidence.to - evidence.from) * 0.2, narrowestUs);
        show(evidence.from - margin, evidence.to + margin);
        svg.scrollIntoView({ block: 'nearest' });
      }
    });
  });

  function fromAddress() {
    var match = /^#t=(\d+(?:\.\d+)?)\.\.(\d+(?:\.\d+)?)$/.exec(location.hash);
    if (match) {
      show(Number(match[1]), Number(match[2]));
    }
  }
  window.addEventListener('hashchange', fromAddress);
  fromAddress();
})();
