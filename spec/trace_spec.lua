-- fh.trace (docs/pipeline.md, "Tracing"): every copy, replay, eager launch
-- group and synchronization, with its track, bytes and times; Chrome
-- trace-event JSON (parsed back here with dkjson, an independent parser);
-- an SVG picture. CPU specs run everywhere; the gpu-tagged one traces a CUDA
-- pipeline (one track per stream, event times from the device).
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local json = require "dkjson"

local function tmpname(ext)
  local p = os.tmpname()
  os.remove(p)
  return p .. ext
end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

local function events_of(tr, kind, name)
  local r = {}
  for _, e in ipairs(tr.events) do
    if e.kind == kind and (name == nil or e.name == name) then r[#r + 1] = e end
  end
  return r
end

-- every event of a track starts no earlier than the one before it, and no
-- earlier than the previous one ended (the work of a track, the host or a
-- stream, is sequential); `tol` microseconds of slack (CUDA events resolve
-- about 0.5 us)
local function check_monotone(tr, tol)
  tol = tol or 1e-3
  local last, last_end = {}, {}
  for _, e in ipairs(tr.events) do
    assert.is_true(e.dur_us >= 0)
    assert.is_true(e.start_us >= 0)
    local t = e.track
    if last[t] then
      assert.is_true(e.start_us >= last[t], ("track %d goes back in time"):format(t))
      assert.is_true(e.start_us >= last_end[t] - tol, ("track %d: %s starts before the previous event ends"):format(t,
        e.name))
    end
    last[t] = e.start_us
    last_end[t] = math.max(last_end[t] or 0, e.start_us + e.dur_us)
  end
end

local function f(x, w) return { y = x * w + 1, s = fh.sum(x) } end

describe("fh.trace on the cpu", function()
  after_each(function()
    if fh.trace.active() then pcall(fh.trace.stop) end
  end)

  it("records copies, replays and eager launch groups with bytes, counts and times on the host track", function()
    local x = fh.arange(16, { dtype = "float64" })
    local w = fh.full({ 16 }, 2, { dtype = "float64" })
    local prog = ex.HostGraphProgram.capture(f, { example_inputs = { x, w }, warmup = 0 })
    local buf = ex.ReusableValueBuffer.like({ x, w })
    local before = prog.stats.replays -- the first replay ran during capture
    fh.trace.start()
    assert.is_true(fh.trace.active())
    local a = x + w                  -- an eager launch group
    local b = a:clone()              -- a tensor copy
    buf:copy_from({ b, w })          -- a tree copy
    local h = prog:copy_inputs_from({ a, w })
    prog:replay_prepared { copy_handle = h }
    prog:replay({ x, w })            -- its input copy, then the replay
    local tr = fh.trace.stop()
    assert.is_false(fh.trace.active())
    assert.equal(1, #tr.tracks)
    assert.equal("host", tr.tracks[1].label)
    assert.equal("cpu", tr.tracks[1].device)
    local groups = events_of(tr, "launches")
    assert.is_true(#groups >= 1)
    assert.equal("binary", groups[1].name)
    assert.equal(1, groups[1].count)
    assert.equal("binary x1", groups[1].detail)
    local copies = events_of(tr, "copy", "copy_")
    assert.equal(1, #copies)
    assert.equal(128, copies[1].bytes)
    assert.equal("cpu (pageable) -> cpu (pageable)", copies[1].detail)
    local cf = events_of(tr, "copy", "copy_from")
    assert.equal(1, #cf)
    assert.equal(256, cf[1].bytes)
    assert.equal(2, cf[1].count)
    assert.equal("2 leaves, cpu (pageable) -> cpu (pageable)", cf[1].detail)
    assert.equal(1, #events_of(tr, "copy", "copy_inputs_from"))
    assert.equal(1, #events_of(tr, "copy", "replay inputs"))
    local replays = events_of(tr, "replay", "HostGraphProgram replay")
    assert.equal(2, #replays)
    assert.equal(prog.stats.node_count, replays[1].count)
    assert.matches("^program %d+, replay " .. (before + 1) .. "$", replays[1].detail)
    assert.matches("^program %d+, replay " .. (before + 2) .. "$", replays[2].detail)
    -- nested work is not recorded twice: the copies' own launches are part of them
    assert.equal(#groups, #events_of(tr, "launches"))
    for i = 2, #tr.events do assert.is_true(tr.events[i].seq > tr.events[i - 1].seq) end
    check_monotone(tr)
    assert.is_true(tr.duration_us >= tr.events[#tr.events].start_us)
    assert.equal(0, tr.dropped)
    assert.matches("^fhelium%.Trace%(1 tracks, %d+ events: 4 copies %(.+%), 2 replays, %d+ launch groups, 0 syncs, "
      .. "0 waits; [%d.]+ [mu]?s%)$", tostring(tr))
    local s = tr:summary()
    assert.equal(4, s.copy.count)
    assert.equal(2, s.replay.count)
    prog:close()
    buf:close()
  end)

  it("groups consecutive launches and starts a new group after other traced work", function()
    local x = fh.ones({ 8 })
    fh.trace.start()
    local y = x + 1
    y = y * 2
    y = y - 1
    local z = y:clone()
    z = z + y
    local tr = fh.trace.stop()
    local g = events_of(tr, "launches")
    assert.equal(2, #g)
    assert.equal(3, g[1].count)
    assert.equal(1, g[2].count)
    assert.equal(1, #events_of(tr, "copy"))
    assert.is_true(g[1].start_us + g[1].dur_us <= g[2].start_us)
  end)

  it("records nothing of a capture (its launches go to the tape), but the first replay", function()
    local x = fh.ones({ 8 }, { dtype = "float64" })
    fh.trace.start()
    local prog = ex.HostGraphProgram.capture(function(a) return (a + 1) * 3 end, { example_inputs = { x },
      warmup = 0 })
    local tr = fh.trace.stop()
    assert.equal(0, #events_of(tr, "launches"))
    assert.equal(1, #events_of(tr, "replay"))
    prog:close()
  end)

  it("traces a CPU pipeline: every request's copy in, replay and read-back", function()
    local reqs = {}
    for i = 1, 7 do reqs[i] = { fh.full({ 32 }, i, { dtype = "float64" }), fh.ones({ 32 }, { dtype = "float64" }) } end
    local pipe = fh.pipeline(f, { example_inputs = reqs[1], slots = 3 })
    fh.trace.start()
    pipe:run(reqs)
    local tr = fh.trace.stop()
    assert.equal(7, #events_of(tr, "copy", "copy_inputs_from"))
    assert.equal(7, #events_of(tr, "replay"))
    local rb = events_of(tr, "copy", "read-back")
    assert.equal(7, #rb)
    assert.equal(32 * 8 + 8, rb[1].bytes)
    check_monotone(tr)
    -- the order of each request: copy in, replay, read-back
    local order = {}
    for _, e in ipairs(tr.events) do
      if e.kind ~= "launches" then order[#order + 1] = e.kind == "replay" and "R" or (e.name == "read-back" and "B"
        or "C") end
    end
    assert.equal(("CRB"):rep(7), table.concat(order))
    pipe:close()
  end)

  it("saves Chrome trace-event JSON that parses back to the same events", function()
    local x = fh.arange(16, { dtype = "float64" })
    local prog = ex.HostGraphProgram.capture(function(a) return a * 2 end, { example_inputs = { x }, warmup = 0 })
    fh.trace.start()
    for _ = 1, 3 do prog:replay({ x + 1 }) end
    local tr = fh.trace.stop()
    local path = tmpname(".json")
    assert.equal(tr, tr:save(path))
    local doc, _, err = json.decode(read(path))
    assert.is_nil(err)
    assert.equal("ms", doc.displayTimeUnit)
    assert.equal(0, doc.otherData.dropped_events)
    assert.matches("^fhelium ", doc.otherData.producer)
    local complete, names = {}, {}
    for _, e in ipairs(doc.traceEvents) do
      if e.ph == "M" then
        if e.name == "thread_name" then names[e.tid] = e.args.name end
      else
        assert.equal("X", e.ph)
        assert.is_number(e.ts)
        assert.is_number(e.dur)
        assert.equal(0, e.pid)
        complete[#complete + 1] = e
      end
    end
    assert.equal("host", names[0])
    assert.equal(#tr.events, #complete)
    local last = -1
    for i, e in ipairs(complete) do
      local mine = tr.events[i]
      assert.equal(mine.kind, e.cat)
      assert.equal(mine.name, e.name)
      assert.equal(mine.seq, e.args.seq)
      assert.near(mine.start_us, e.ts, 1e-3)
      assert.near(mine.dur_us, e.dur, 1e-3)
      assert.is_true(e.ts >= last, "times go forward on the track")
      last = e.ts
      if e.cat == "copy" then assert.equal(mine.bytes, e.args.bytes) end
      if e.cat == "replay" then assert.equal(prog.stats.node_count, e.args.nodes) end
      if e.cat == "launches" then assert.equal(mine.count, e.args.launches) end
    end
    os.remove(path)
    prog:close()
  end)

  it("draws the timeline as SVG, one bar and tooltip per event", function()
    local x = fh.ones({ 8 })
    fh.trace.start()
    local y = (x + 1):clone()
    local tr = fh.trace.stop()
    local path = tmpname(".svg")
    assert.equal(tr, tr:svg(path, { title = "a <small> & simple trace", width = 800 }))
    local svg = read(path)
    assert.matches("^<%?xml version=\"1.0\" encoding=\"UTF%-8\"%?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
      .. "width=\"800\"", svg)
    assert.matches("</svg>\n$", svg)
    assert.truthy(svg:find("a &lt;small&gt; &amp; simple trace", 1, true))
    local titles = select(2, svg:gsub("<title>", ""))
    assert.equal(#tr.events, titles)
    assert.equal(titles, select(2, svg:gsub("</title>", "")))
    assert.truthy(svg:find(">host</text>", 1, true))
    os.remove(path)
    assert.is_number(fh.sum(y):item())
  end)

  it("raises clear errors", function()
    fh.trace.start()
    H.expect_error("StateError", "fh.trace.start: a trace is already running %(stop it first%)", fh.trace.start)
    local tr = fh.trace.stop()
    H.expect_error("StateError", "fh.trace.stop: no trace is running %(start one with fh.trace.start%)", fh.trace.stop)
    local missing = "/nonexistent_dir_fhelium/run"
    H.expect_error("IOError", "trace:save: cannot open '" .. missing .. ".json': No such file or directory", tr.save,
      tr, missing .. ".json")
    H.expect_error("IOError", "trace:svg: cannot open '" .. missing .. ".svg': No such file or directory", tr.svg, tr,
      missing .. ".svg")
    H.expect_error("TypeError", "trace:save: argument 1 %(path%) expected a string, got number", tr.save, tr, 3)
    H.expect_error("TypeError", "trace:svg: argument 1 %(path%) expected a string, got nil", tr.svg, tr)
    H.expect_error("TypeError", "trace:save: expected a Trace", tr.save, {}, "x.json")
    H.expect_error("ValueError", "trace:svg: unknown option 'colour'", tr.svg, tr, tmpname(".svg"), { colour = 1 })
    H.expect_error("TypeError", "trace:svg: argument 2 %(options%) expected a table, got number", tr.svg, tr,
      tmpname(".svg"), 800)
    -- a file that opens but cannot take the bytes (Linux's /dev/full: every write is ENOSPC)
    local full = io.open("/dev/full", "w")
    if full then
      full:close()
      H.expect_error("IOError", "trace:svg: cannot write '/dev/full': No space left on device", tr.svg, tr, "/dev/full")
    end
    H.expect_error("ValueError", "trace:svg: width must be a number in %[400, 100000%], got 10", tr.svg, tr,
      tmpname(".svg"), { width = 10 })
  end)
end)

describe("fh.trace on cuda:0", function()
  H.gpu_it("traces a CUDA pipeline: one track per stream, device times, waits and host syncs", function()
    local reqs = {}
    for i = 1, 6 do reqs[i] = { fh.full({ 4096 }, i, { dtype = "float64", pin_memory = true }) } end
    local pipe = fh.pipeline(function(x) return (x * 2) + 1 end, { example_inputs = reqs[1], slots = 2,
      compute_streams = 2, device = "cuda:0" })
    fh.trace.start()
    local results = pipe:run(reqs)
    local tr = fh.trace.stop()
    for i, r in ipairs(results) do assert.equal(4096 * (2 * i + 1), fh.sum(r):item()) end
    local by_label = {}
    for i, t in ipairs(tr.tracks) do by_label[t.name ~= "" and t.name or t.label] = i end
    local cin, cout = by_label["copy-in"], by_label["copy-out"]
    local c1, c2, host = by_label["compute 1"], by_label["compute 2"], by_label["host"]
    assert.is_number(cin)
    assert.is_number(cout)
    assert.is_number(c1)
    assert.is_number(c2)
    assert.is_number(host)
    assert.equal("stream " .. pipe.copy_in.id .. " (copy-in)", tr.tracks[cin].label)
    local function on(track, kind, name)
      local r = {}
      for _, e in ipairs(tr.events) do
        if e.track == track and e.kind == kind and (name == nil or e.name == name) then r[#r + 1] = e end
      end
      return r
    end
    local ins = on(cin, "copy", "copy_inputs_from")
    assert.equal(6, #ins)
    assert.equal("1 leaf, cpu (pinned) -> cuda:0", ins[1].detail)
    assert.equal(4096 * 8, ins[1].bytes)
    assert.equal(3, #on(c1, "replay"))
    assert.equal(3, #on(c2, "replay"))
    local outs = on(cout, "copy", "read-back")
    assert.equal(6, #outs)
    assert.equal("1 leaf, cuda:0 -> cpu (pinned)", outs[1].detail)
    assert.is_true(#on(cout, "wait") >= 6, "each read-back waits for its compute")
    assert.is_true(#on(host, "sync") >= 6, "each result() waits on the host")
    check_monotone(tr, 1.0)
    -- each request's read-back starts after its replay ended (device times)
    local replays = {}
    for _, e in ipairs(tr.events) do if e.kind == "replay" then replays[#replays + 1] = e end end
    table.sort(replays, function(p, q) return p.seq < q.seq end)
    for i = 1, 6 do
      assert.is_true(outs[i].start_us >= replays[i].start_us + replays[i].dur_us - 1,
        ("read-back %d starts before its replay ends"):format(i))
      assert.is_true(replays[i].start_us >= ins[i].start_us + ins[i].dur_us - 1,
        ("replay %d starts before its copy ends"):format(i))
    end
    local path = tmpname(".json")
    tr:save(path)
    local doc, _, err = json.decode(read(path))
    assert.is_nil(err)
    local pids = {}
    for _, e in ipairs(doc.traceEvents) do
      if e.ph == "M" and e.name == "process_name" then pids[e.args.name] = e.pid end
    end
    assert.equal(0, pids.host)
    assert.equal(1, pids["cuda:0"])
    os.remove(path)
    pipe:close()
  end)
end)
