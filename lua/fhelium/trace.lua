-- fh.trace: a timeline of the work this thread submits (docs/pipeline.md,
-- "Tracing"). The engine records (engine/runtime/trace.c, fh/trace.h):
--   copy      tree copies (copy_from, copy_inputs_from, replay inputs, a
--             pipeline's read-back) and tensor copies, with bytes and direction;
--   replay    program launches (CUDA graphs, host tapes), with their nodes;
--   launches  groups of eager launches on one stream, with the kernels' names;
--   sync      the host waiting (stream, event, device synchronize);
--   wait      a stream waiting for an event or another stream (an instant).
-- Work on CUDA streams is timed by CUDA events (when the device ran it),
-- host work by the host clock; times are microseconds since start().
--
--   fh.trace.start()
--   ... work ...
--   local tr = fh.trace.stop()       -- waits for the traced work, then reads the times
--   tr:save("run.json")              -- Chrome trace-event JSON: Perfetto, chrome://tracing
--   tr:svg("run.svg")                -- the same timeline as a picture
--   tr.events, tr.tracks, tr:summary()
local core = require "fhelium.core"
local errors = require "fhelium.errors"

local M = {}

local Trace = {}
Trace.__index = Trace
M.Trace = Trace

--- fh.trace.start(): start recording this thread's work. StateError when a
--- trace already runs.
function M.start()
  core.trace_start()
end

--- fh.trace.active(): true while a trace runs.
function M.active()
  return core.trace_active()
end

--- fh.trace.stop() -> a Trace. Waits for the traced work to complete.
--- StateError when no trace runs.
function M.stop()
  local data = core.trace_stop()
  local info = data:info()
  local self = setmetatable({
    _data = data,
    events = data:events(),   -- {kind, name, detail, track, start_us, dur_us, bytes, count, seq}, by track then time
    tracks = data:tracks(),   -- {label, device, stream, name, priority, is_default}
    duration_us = info.duration_us,
    dropped = info.dropped,
  }, Trace)
  return self
end

local function check_self(self, fn)
  if getmetatable(self) ~= Trace then
    errors.raise("TypeError", ("%s: expected a Trace (call it as trace:%s(...)), got %s"):format(fn,
      fn:match("[:.](%w+)$"), type(self)), nil, 3)
  end
end

local function check_path(fn, path)
  if type(path) ~= "string" then
    errors.raise("TypeError", ("%s: argument 1 (path) expected a string, got %s"):format(fn, type(path)), nil, 3)
  end
end

--- trace:save(path): Chrome trace-event JSON (one process per device, one
--- track per stream). Returns the trace. IOError when the file cannot be
--- written.
function Trace:save(path)
  check_self(self, "trace:save")
  check_path("trace:save", path)
  self._data:save_json(path)
  return self
end

--- trace:summary(): {<kind> = {count=, bytes=, busy_us=}, tracks = {<label> = busy_us}}.
function Trace:summary()
  check_self(self, "trace:summary")
  local s = { tracks = {} }
  for _, k in ipairs { "copy", "replay", "launches", "sync", "wait" } do s[k] = { count = 0, bytes = 0, busy_us = 0 } end
  for _, e in ipairs(self.events) do
    local k = s[e.kind]
    k.count = k.count + 1
    k.bytes = k.bytes + e.bytes
    k.busy_us = k.busy_us + e.dur_us
    local label = self.tracks[e.track].label
    s.tracks[label] = (s.tracks[label] or 0) + e.dur_us
  end
  return s
end

local function human_bytes(n)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local u = 1
  while n >= 1024 and u < #units do n, u = n / 1024, u + 1 end
  return u == 1 and ("%d B"):format(n) or ("%.1f %s"):format(n, units[u])
end
M._human_bytes = human_bytes

local function human_us(us)
  if us >= 1e6 then return ("%.3f s"):format(us / 1e6) end
  if us >= 1e3 then return ("%.2f ms"):format(us / 1e3) end
  return ("%.1f us"):format(us)
end

function Trace:__tostring()
  local s = self:summary()
  return ("fhelium.Trace(%d tracks, %d events: %d copies (%s), %d replays, %d launch groups, %d syncs, %d waits; %s%s)")
    :format(#self.tracks, #self.events, s.copy.count, human_bytes(s.copy.bytes), s.replay.count, s.launches.count,
      s.sync.count, s.wait.count, human_us(self.duration_us),
      self.dropped > 0 and (", %d dropped"):format(self.dropped) or "")
end

-- ---- SVG ------------------------------------------------------------------------
local function xml(s)
  return (tostring(s):gsub("[&<>\"']", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
    ["'"] = "&apos;" }))
end

local COLORS = {
  copy_in = "#4c78a8", copy_out = "#72b7b2", copy = "#9ecae9", replay = "#f58518", launches = "#b279a2",
  sync = "#e45756", wait = "#222222",
}
local LEGEND = {
  { "copy_in", "copy to the device" }, { "copy_out", "copy to the host" }, { "copy", "other copy" },
  { "replay", "program replay" }, { "launches", "eager launches" }, { "sync", "host waits" },
  { "wait", "stream waits (tick)" },
}

local function color_of(e)
  if e.kind == "copy" then
    -- detail: "[<n> leaves, ]<from> -> <to>"
    local from, to = e.detail:match("([^,]*)%->%s*(.*)$")
    if not from then return COLORS.copy end
    local from_cuda, to_cuda = from:find("cuda") ~= nil, to:find("^cuda") ~= nil
    if to_cuda and not from_cuda then return COLORS.copy_in end
    if from_cuda and not to_cuda then return COLORS.copy_out end
    return COLORS.copy
  end
  return COLORS[e.kind] or "#888888"
end

-- a tick step of 1, 2 or 5 x 10^k microseconds giving about n ticks
local function tick_step(span, n)
  local raw = span / n
  local p = 10 ^ math.floor(math.log10(raw))
  for _, m in ipairs { 1, 2, 5, 10 } do
    if m * p >= raw then return m * p end
  end
  return 10 * p
end

--- trace:svg(path, {width = 1400, title = nil}): the timeline as an SVG
--- picture (one row per track, bars coloured by kind, a tooltip per bar).
--- Returns the trace. IOError when the file cannot be written.
function Trace:svg(path, opts)
  check_self(self, "trace:svg")
  check_path("trace:svg", path)
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise("TypeError", ("trace:svg: argument 2 (options) expected a table, got %s"):format(type(opts)), nil, 2)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "width" and k ~= "title" then
      errors.raise("ValueError", ("trace:svg: unknown option '%s' (expected width, title)"):format(tostring(k)), nil, 2)
    end
  end
  local width = opts.width or 1400
  if type(width) ~= "number" or width < 400 or width > 100000 then
    errors.raise("ValueError", ("trace:svg: width must be a number in [400, 100000], got %s"):format(tostring(width)),
      nil, 2)
  end
  local label_w, row_h, top, bottom = 300, 26, 70, 40
  local plot_w = width - label_w - 20
  local span = math.max(self.duration_us, 1)
  local x0 = label_w
  local function x(us) return x0 + us / span * plot_w end
  local height = top + #self.tracks * row_h + bottom
  local out = {}
  local function w(s) out[#out + 1] = s end
  w(('<?xml version="1.0" encoding="UTF-8"?>\n'))
  w(('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" '
    .. 'font-size="12">\n'):format(width, height, width, height))
  w(('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>\n'):format(width, height))
  local title = opts.title or ("fhelium trace: %d events on %d tracks, %s"):format(#self.events, #self.tracks,
    human_us(self.duration_us))
  w(('<text x="10" y="20" font-size="15" font-weight="bold">%s</text>\n'):format(xml(title)))
  -- legend
  local lx = 10
  for _, l in ipairs(LEGEND) do
    w(('<rect x="%d" y="30" width="12" height="12" fill="%s"/><text x="%d" y="40">%s</text>\n'):format(lx,
      COLORS[l[1]], lx + 16, xml(l[2])))
    lx = lx + 24 + 7 * #l[2]
  end
  -- rows
  for i, t in ipairs(self.tracks) do
    local y = top + (i - 1) * row_h
    if i % 2 == 0 then
      w(('<rect x="0" y="%d" width="%d" height="%d" fill="#f4f4f4"/>\n'):format(y, width, row_h))
    end
    local label = t.stream == 0 and "host" or ("%s %s"):format(t.device, t.label)
    w(('<text x="10" y="%d">%s</text>\n'):format(y + row_h - 9, xml(label)))
  end
  -- time axis
  local step = tick_step(span, 10)
  local axis_y = top + #self.tracks * row_h
  w(('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>\n'):format(x0, axis_y, x0 + plot_w, axis_y))
  local tk = 0
  while tk <= span + 1e-9 do
    local px = x(tk)
    w(('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#ccc"/>\n'):format(px, top, px, axis_y + 5))
    w(('<text x="%.2f" y="%d" text-anchor="middle">%s</text>\n'):format(px, axis_y + 18, xml(human_us(tk))))
    tk = tk + step
  end
  -- events
  for _, e in ipairs(self.events) do
    local y = top + (e.track - 1) * row_h
    local tip = ("%s: %s%s\nstart %s, duration %s%s"):format(e.kind, e.name, e.detail ~= "" and (" (" .. e.detail .. ")")
      or "", human_us(e.start_us), human_us(e.dur_us), e.kind == "copy" and (", " .. human_bytes(e.bytes)) or "")
    if e.kind == "wait" then
      local px = x(e.start_us)
      w(('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="%s" stroke-width="1"><title>%s</title></line>\n'):format(
        px, y + 2, px, y + 7, COLORS.wait, xml(tip)))
    else
      local px, pw = x(e.start_us), math.max(e.dur_us / span * plot_w, 0.5)
      w(('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s</title></rect>\n'):format(px, y + 8, pw,
        row_h - 12, color_of(e), xml(tip)))
    end
  end
  w("</svg>\n")
  local f, err = io.open(path, "w")
  if not f then
    errors.raise("IOError", ("trace:svg: cannot open '%s': %s"):format(path, tostring(err):gsub("^[^:]*: ", "")), nil, 2)
  end
  local ok, werr = f:write(table.concat(out))
  local cok, cerr = f:close()
  if not ok or not cok then
    errors.raise("IOError", ("trace:svg: cannot write '%s': %s"):format(path, tostring(werr or cerr)), nil, 2)
  end
  return self
end

return M
