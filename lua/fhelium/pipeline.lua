-- fhelium.pipeline (also fh.pipeline): a ring of K slots that streams
-- requests through one captured function: copies in, replays and read-backs
-- overlap on separate streams, and every ordering between them is an event.
-- docs/pipeline.md has the picture of the dependency pattern.
--
--   local pipe = fh.pipeline(fn, {example_inputs = {x}, slots = 2, compute_streams = 1, device = "cuda:0"})
--   local req = pipe:push({x_i})          -- never blocks the host
--   local y = req:result()                -- blocks until request i's result is on the host
--   pipe:close()
--
-- A slot is an input set with its own program instance (a CudaGraphProgram
-- on a CUDA device, a HostGraphProgram on the cpu, both captured from fn),
-- or with capture = false a ReusableValueBuffer that fn reads eagerly.
-- Request i (1-based) goes to slot k = (i - 1) % K + 1; slot k's work runs
-- on compute stream (k - 1) % S + 1. On a CUDA device, for request i in
-- slot k:
--   copy in     on the copy-in stream, after released[k]: the event recorded
--               after the slot's previous read-back, its last reader (the
--               read-back follows the slot's compute, which reads the inputs;
--               it reads the outputs, which the next replay overwrites, and
--               the inputs too when an output aliases them);
--   compute     on the slot's compute stream, after the copy (its handle);
--   read-back   on the copy-out stream after the compute (an event), into
--               a new tree in pinned host memory; then released[k] is
--               recorded, and the request keeps that event.
-- So every copy into a slot follows the slot's last reader, every compute
-- its copy, every read-back its compute; the waits are on the device. The
-- host never waits except in req:result(), req:wait(), pipe:run(),
-- pipe:synchronize(), pipe:measure() and pipe:close(). On the cpu the same
-- three steps run synchronously, in order.
local core = require "fhelium.core"
local errors = require "fhelium.errors"

local M = {}
local Pipeline = {} -- methods
local PipelineMT = { methods = Pipeline, fields = { "stats", "device", "nslots", "nstreams", "capture", "slots",
  "copy_in", "compute", "copy_out", "is_cuda" } }
local Request = {}
Request.__index = Request
M.Pipeline = Pipeline
M.Request = Request

local NAME = "fh.pipeline"
local clock = core.exec_clock

local function ex() return require "fhelium.execution" end
local function cuda() return require "fhelium.cuda" end

local function raise(kind, msg, level, opts) errors.raise(kind, msg, opts, (level or 1) + 1) end

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

local function is_int(v, lo, hi) return type(v) == "number" and v == math.floor(v) and v >= lo and v <= hi end

local function pack(...) return { n = select("#", ...), ... } end

-- "cpu", "cuda:N" from a device string; ValueError for anything else
local function canon_device(d, what)
  if type(d) ~= "string" then
    raise("TypeError", ("%s: %s expected a device string, got %s"):format(NAME, what, type(d)), 3)
  end
  if d == "cpu" then return "cpu" end
  if d == "cuda" then return "cuda:" .. cuda().current_device() end
  local n = d:match("^cuda:(%d+)$")
  if n then return "cuda:" .. tonumber(n) end
  raise("ValueError", ("%s: invalid device string '%s' for %s (expected \"cpu\", \"cuda\" or \"cuda:N\")"):format(NAME,
    d, what), 3)
end

local function is_stream(s)
  local mt = getmetatable(s)
  return type(s) == "userdata" and mt ~= nil and mt.__name == "fhelium.Stream"
end

local function is_program(p)
  return type(p) == "userdata" and getmetatable(p) == ex().CudaGraphProgram.metatable
end

-- Re-raise an error of a lower layer under `fname`: its message loses the
-- lower function's name, keeps its kind, path and stage.
local function reraise(fname, err, level)
  if not errors.is_error(err) then error(err, 0) end
  local msg = err.message:gsub("^[%w%.]+[:%.][%w_]+: ", "")
  local e = errors.new(err.kind, fname .. ": " .. msg, { path = err.path, stage = err.stage })
  e.cause = err
  error(e, 0)
end

local option_keys = {
  example_inputs = true, slots = true, compute_streams = true, device = true, warmup = true, capture = true,
  priority = true, streams = true,
}
local OPTION_LIST = "example_inputs, slots, compute_streams, device, warmup, capture, priority, streams"

-- ---- construction ---------------------------------------------------------------
local function check_priority(p, what)
  if not is_int(p, -1000, 1000) then
    raise("ValueError", ("%s: %s must be an integer (lower = higher priority; fh.cuda.stream_priority_range gives "
      .. "the device's range), got %s"):format(NAME, what, tostring(p)), 4)
  end
  return p
end

-- the three stream roles from opts.streams / opts.priority
local function make_streams(self, opts, nstreams)
  local given = opts.streams
  local prio = opts.priority
  local pr = { copy_in = 0, compute = 0, copy_out = 0 }
  if type(prio) == "number" then
    check_priority(prio, "priority")
    pr = { copy_in = prio, compute = prio, copy_out = prio }
  elseif type(prio) == "table" then
    for k, v in pairs(prio) do
      if pr[k] == nil then
        raise("ValueError", ("%s: unknown priority '%s' (expected copy_in, compute, copy_out)"):format(NAME,
          tostring(k)), 3)
      end
      pr[k] = check_priority(v, "priority." .. k)
    end
  elseif prio ~= nil then
    raise("TypeError", ("%s: priority expected a number or a table {copy_in=, compute=, copy_out=}, got %s"):format(
      NAME, type(prio)), 3)
  end
  local dev = self.device
  if dev == "cpu" then
    if given ~= nil then
      raise("ValueError", ("%s: streams apply to CUDA pipelines; this pipeline runs on cpu, where every step runs "
        .. "on the host in order"):format(NAME), 3)
    end
    return
  end
  local index = tonumber(dev:match("%d+"))
  local seen = {}
  local function take(s, what)
    if not is_stream(s) then
      raise("TypeError", ("%s: %s expected a fh.cuda.Stream, got %s"):format(NAME, what, type(s)), 4)
    end
    if s.device ~= dev then
      raise("ValueError", ("%s: %s is a stream of %s but the pipeline runs on %s"):format(NAME, what, s.device, dev),
        4)
    end
    for other, owhat in pairs(seen) do
      if other == s then
        raise("ValueError", ("%s: %s and %s are the same stream; copies and compute overlap only on distinct "
          .. "streams"):format(NAME, owhat, what), 4)
      end
    end
    seen[s] = what
    return s
  end
  if given ~= nil and type(given) ~= "table" then
    raise("TypeError", ("%s: streams expected a table {copy_in=, compute=, copy_out=}, got %s"):format(NAME,
      type(given)), 3)
  end
  given = given or {}
  for k in pairs(given) do
    if k ~= "copy_in" and k ~= "compute" and k ~= "copy_out" then
      raise("ValueError", ("%s: unknown stream role '%s' (expected copy_in, compute, copy_out)"):format(NAME,
        tostring(k)), 3)
    end
  end
  local C = cuda()
  local function new(name, p) return C.Stream { device = index, priority = p, name = name } end
  self.copy_in = given.copy_in and take(given.copy_in, "streams.copy_in") or new("copy-in", pr.copy_in)
  seen[self.copy_in] = seen[self.copy_in] or "streams.copy_in"
  self.copy_out = given.copy_out and take(given.copy_out, "streams.copy_out") or new("copy-out", pr.copy_out)
  seen[self.copy_out] = seen[self.copy_out] or "streams.copy_out"
  local compute = {}
  local gc = given.compute
  if gc ~= nil then
    if is_stream(gc) then gc = { gc } end
    if type(gc) ~= "table" or #gc == 0 then
      raise("TypeError", ("%s: streams.compute expected a stream or a non-empty list of streams, got %s"):format(NAME,
        type(gc)), 3)
    end
    if nstreams ~= nil and nstreams ~= #gc then
      raise("ValueError", ("%s: compute_streams is %d but streams.compute holds %d streams"):format(NAME, nstreams,
        #gc), 3)
    end
    for j, s in ipairs(gc) do compute[j] = take(s, ("streams.compute[%d]"):format(j)) end
  else
    for j = 1, nstreams or 1 do compute[j] = new(("compute %d"):format(j), pr.compute) end
  end
  self.compute = compute
end

local function check_programs(progs, dev_opt)
  local X = ex()
  local dev, sig
  for i, p in ipairs(progs) do
    local what = ("programs[%d] (slot %d)"):format(i, i)
    if not is_program(p) then
      raise("TypeError", ("%s: %s expected a CudaGraphProgram or HostGraphProgram, got %s"):format(NAME, what,
        type(p)), 4)
    end
    if p:is_closed() then raise("ExecutionError", ("%s: %s is closed"):format(NAME, what), 4) end
    local d = p.device
    if dev_opt and d ~= dev_opt then
      raise("ValueError", ("%s: %s is a %s of %s but the pipeline runs on %s"):format(NAME, what, p.kind, d, dev_opt),
        4)
    end
    if dev and d ~= dev then
      raise("ValueError", ("%s: %s runs on %s but programs[1] on %s; every slot lives on the pipeline's device"):format(
        NAME, what, d, dev), 4)
    end
    dev = dev or d
    for j = 1, i - 1 do
      if rawequal(progs[j], p) then
        raise("ValueError", ("%s: programs[%d] and programs[%d] are the same program; each slot needs its own "
          .. "program instance (capture the function once per slot)"):format(NAME, j, i), 4)
      end
    end
    local s = p.input_signature
    if sig and not (s == sig) then
      raise("ValueError", ("%s: %s takes other inputs than programs[1] (%s vs %s); every slot runs the same "
        .. "function"):format(NAME, what, tostring(s), tostring(sig)), 4)
    end
    sig = sig or s
  end
  return dev
end

local function new(fn, opts)
  core.exec_refuse_in_capture(NAME, "a pipeline captures programs and runs work on streams; build it before the "
    .. "capture")
  local progs
  if type(fn) == "table" and not callable(fn) then
    progs = fn
    if #progs == 0 then
      raise("ValueError", ("%s: argument 1 is an empty list (expected a function or a list of programs)"):format(NAME),
        2)
    end
  elseif not callable(fn) then
    raise("TypeError", ("%s: argument 1 (fn) expected a function, a callable table or a list of programs, got %s")
      :format(NAME, type(fn)), 2)
  end
  if opts ~= nil and type(opts) ~= "table" then
    raise("TypeError", ("%s: argument 2 (options) expected a table, got %s"):format(NAME, type(opts)), 2)
  end
  opts = opts or {}
  for k in pairs(opts) do
    if not option_keys[k] then
      raise("ValueError", ("%s: unknown option '%s' (expected %s)"):format(NAME, tostring(k), OPTION_LIST), 2)
    end
  end
  local capture = opts.capture
  if capture == nil then capture = true end
  if type(capture) ~= "boolean" then
    raise("TypeError", ("%s: capture expected a boolean, got %s"):format(NAME, type(capture)), 2)
  end
  local slots = opts.slots
  if slots ~= nil and not is_int(slots, 1, 64) then
    raise("ValueError", ("%s: slots must be an integer in [1, 64], got %s"):format(NAME, tostring(slots)), 2)
  end
  local nstreams = opts.compute_streams
  if nstreams ~= nil and not is_int(nstreams, 1, 32) then
    raise("ValueError", ("%s: compute_streams must be an integer in [1, 32], got %s"):format(NAME, tostring(nstreams)),
      2)
  end
  local warmup = opts.warmup
  if warmup ~= nil and not is_int(warmup, 0, 1e6) then
    raise("ValueError", ("%s: warmup must be an integer >= 0, got %s"):format(NAME, tostring(warmup)), 2)
  end
  local dev = opts.device ~= nil and canon_device(opts.device, "device") or nil

  local self = setmetatable({ capture = capture, _closed = false, _pushed = 0, _taken = 0, _push_seconds = 0,
    _inflight = {}, _head = 1, _owned = {} }, PipelineMT)
  local inputs = opts.example_inputs
  if progs then
    if inputs ~= nil then
      raise("ValueError", ("%s: example_inputs applies when fn is captured; programs were given (they were "
        .. "captured already)"):format(NAME), 2)
    end
    if opts.capture == false then
      raise("ValueError", ("%s: capture = false runs fn eagerly; programs were given"):format(NAME), 2)
    end
    if warmup ~= nil then raise("ValueError", ("%s: warmup applies when fn is captured; programs were given"):format(
      NAME), 2) end
    if slots ~= nil and slots ~= #progs then
      raise("ValueError", ("%s: slots is %d but %d programs were given (one program per slot)"):format(NAME, slots,
        #progs), 2)
    end
    self.device = check_programs(progs, dev)
    slots = #progs
  else
    if inputs == nil then
      raise("ValueError", ("%s: example_inputs is required (the list of fn's dynamic arguments)"):format(NAME), 2)
    end
    local ok, sig = pcall(core.tree_signature, inputs)
    if not ok then reraise(NAME, sig) end
    if sig.kind ~= "list" and sig.kind ~= "tuple" then
      raise("TypeError", ("%s: example_inputs must be a list of fn's arguments, got a %s"):format(NAME, sig.kind), 2)
    end
    self._nargs = #sig.children
    if dev == nil then
      -- the example's device, as ReusableValueBuffer.like decides it
      local bok, b = pcall(core.buffer_like, inputs, nil, "example_inputs")
      if not bok then reraise(NAME, b) end
      dev = b.device
      b:close()
    end
    self.device = dev
    slots = slots or 2
  end
  self.is_cuda = self.device ~= "cpu"
  if self.is_cuda and not cuda().is_available() then
    raise("CudaError", ("%s: the pipeline runs on %s: %s"):format(NAME, self.device, cuda().unavailable_reason()), 2)
  end
  nstreams = nstreams or (opts.streams and type(opts.streams) == "table" and type(opts.streams.compute) == "table"
    and #opts.streams.compute > 0 and #opts.streams.compute) or nil
  if nstreams ~= nil and nstreams > slots then
    raise("ValueError", ("%s: %d compute streams need at least as many slots, got %d (a stream works on a slot; "
      .. "with fewer slots some streams stay idle)"):format(NAME, nstreams, slots), 2)
  end
  make_streams(self, opts, nstreams)
  self.nstreams = self.is_cuda and #self.compute or (nstreams or 1)
  self.nslots = slots
  -- the slots
  local X = ex()
  self.slots = {}
  local ok, err = pcall(function()
    local args = inputs
    local staging
    if not progs and self.device ~= "cpu" then
      -- capture and eager slots start from the example on the device
      staging = X.ReusableValueBuffer.like(inputs, { device = self.device })
      args = staging.value
    end
    for k = 1, slots do
      local slot = { index = k, pushes = 0 }
      if progs then
        slot.program = progs[k]
      elseif capture then
        local P = self.is_cuda and X.CudaGraphProgram or X.HostGraphProgram
        slot.program = P.capture(fn, { example_inputs = args, warmup = warmup or 1 })
        self._owned[#self._owned + 1] = slot.program
      else
        slot.buffer = X.ReusableValueBuffer.like(args, { device = self.device })
        self._owned[#self._owned + 1] = slot.buffer
      end
      slot.stream = self.is_cuda and self.compute[(k - 1) % #self.compute + 1] or nil
      slot.stream_index = (k - 1) % self.nstreams + 1
      self.slots[k] = slot
    end
    if staging then staging:close() end
  end)
  if not ok then
    for _, o in ipairs(self._owned) do pcall(o.close, o) end
    self._owned = {}
    reraise(NAME, err)
  end
  self.fn = fn
  return self
end

M.new = new
setmetatable(M, { __call = function(_, fn, opts) return new(fn, opts) end })

-- ---- pushing ------------------------------------------------------------------------
local function check_open(self, fn)
  if getmetatable(self) ~= PipelineMT then
    raise("TypeError", ("%s: expected a pipeline (call it as pipe:%s(...)), got %s"):format(fn, fn:match(":(%w+)$"),
      type(self)), 3)
  end
  if self._closed then raise("ExecutionError", ("%s: the pipeline is closed"):format(fn), 3) end
end

local function run_fn(self, args)
  return self.fn(unpack(args, 1, self._nargs))
end

local function eager_output(self, fname, slot)
  local res = pack(run_fn(self, slot.buffer.value))
  if res.n > 1 then
    raise("ValueError", ("%s: fn returned %d values; return one output tree (a list or ex.tuple of them)"):format(
      fname, res.n), 4)
  end
  return res[1]
end

local function new_request(self, i, slot, result, event)
  return setmetatable({ pipeline = self, index = i, slot = slot.index, stream = slot.stream_index, _result = result,
    _event = event }, Request)
end

-- the steps of one request; raises with the pipeline's name
local function push_one(self, fname, inputs)
  local i = self._pushed + 1
  local slot = self.slots[(i - 1) % self.nslots + 1]
  local prog, buf = slot.program, slot.buffer
  if not self.is_cuda then
    local out
    if prog then
      local h = prog:copy_inputs_from(inputs)
      out = prog:replay_prepared { copy_handle = h }
    else
      buf:copy_from(inputs)
      out = eager_output(self, fname, slot)
    end
    local result = out ~= nil and core.tree_copy_to(out, { device = "cpu" }) or nil
    return new_request(self, i, slot, result, nil)
  end
  local cs = slot.stream
  -- copy in, after the slot's last reader (its previous read-back)
  local wait = not self._skip_consumer_wait and slot.released or nil
  local result, released
  if prog then
    -- the three steps in one engine call (the same copies, waits and events as
    -- copy_inputs_from, replay_prepared{stream = cs} and _read_back on copy_out, then
    -- an event recorded on copy_out): the host's cost per request bounds the pipeline
    result, released = prog:_push(inputs, self.copy_in, wait, cs, self.copy_out)
  else
    local h = buf:copy_from(inputs, { stream = self.copy_in, wait_for = wait })
    -- compute, after the copy
    h:wait_on(cs)
    local out = cuda().with_stream(cs, eager_output, self, fname, slot)
    -- read back, after the compute; the slot is free again after it
    self.copy_out:wait_event(cs:record_event())
    if out ~= nil then
      result = core.tree_copy_to(out, { device = "cpu", pin_memory = true, stream = self.copy_out })
    end
    released = self.copy_out:record_event()
  end
  slot.released = released
  return new_request(self, i, slot, result, released)
end

-- drop the completed read-backs from the front of the in-flight list
local function poll(self)
  local q = self._inflight
  local h = self._head
  if not self.is_cuda then return end
  while h <= #q do
    local ok, done = pcall(q[h].query, q[h])
    if not ok or not done then break end
    q[h] = false
    h = h + 1
  end
  if h > 64 and h > #q / 2 then
    local n = {}
    for j = h, #q do n[#n + 1] = q[j] end
    self._inflight, self._head = n, 1
  else
    self._head = h
  end
end

--- pipe:push(inputs) -> a request: inputs (a list of fn's arguments, like
--- a replay's) go into the next slot. Never blocks the host (on the cpu the
--- request is complete when push returns). Pinned sources keep every copy
--- asynchronous; pageable ones are staged first.
function Pipeline:push(inputs)
  check_open(self, "Pipeline:push")
  core.exec_refuse_in_capture("Pipeline:push", "pushing runs copies and replays on the pipeline's streams")
  if inputs == nil then raise("TypeError", "Pipeline:push: argument 1 (inputs) is missing", 2) end
  local t0 = clock()
  local ok, req = pcall(push_one, self, "Pipeline:push", inputs)
  if not ok then
    -- an eager slot's buffer names its argument `source`: the caller passed `inputs`
    if errors.is_error(req) and type(req.path) == "string" and req.path:find("^source") then
      req = errors.new(req.kind, (req.message:gsub(": source", ": inputs", 1)), { path = req.path:gsub("^source",
        "inputs"), stage = req.stage })
    end
    reraise("Pipeline:push", req)
  end
  self._pushed = self._pushed + 1
  local slot = self.slots[req.slot]
  slot.pushes = slot.pushes + 1
  if req._event then
    local q = self._inflight
    q[#q + 1] = req._event
    -- drop the completed ones (never blocks), so that the list stays short; an event
    -- query costs about a microsecond, so only once more than a ring's worth is listed
    if #q - self._head >= self.nslots then poll(self) end
  end
  self._push_seconds = self._push_seconds + (clock() - t0)
  return req
end

--- pipe:run(requests) -> results: pushes every request (a list of input
--- lists), then waits for each result in order. Every request is checked
--- against the slots' inputs first: a bad one raises (naming requests[i])
--- before anything is pushed.
function Pipeline:run(requests)
  check_open(self, "Pipeline:run")
  if type(requests) ~= "table" then
    raise("TypeError", ("Pipeline:run: argument 1 (requests) expected a list of input lists, got %s"):format(
      type(requests)), 2)
  end
  local s1 = self.slots[1]
  local sig = s1.program and s1.program.input_signature or s1.buffer.signature
  for i = 1, #requests do
    local ok, err = pcall(sig.validate, sig, requests[i], { path = ("requests[%d]"):format(i) })
    if not ok then
      if not errors.is_error(err) then error(err, 0) end
      -- the kind push raises: a program's input error, or a buffer's
      local kind = err.kind
      if kind == "ExecutionInputError" and s1.program then kind = "CudaGraphInputError" end
      raise(kind, "Pipeline:run: " .. err.message:gsub("^[%w%.]+[:%.][%w_]+: ", ""), 2, { path = err.path })
    end
  end
  local reqs = {}
  for i = 1, #requests do reqs[i] = self:push(requests[i]) end
  local results = {}
  for i = 1, #reqs do results[i] = reqs[i]:result() end
  return results
end

--- pipe:in_flight(): requests whose result is not on the host yet (never blocks).
function Pipeline:in_flight()
  check_open(self, "Pipeline:in_flight")
  poll(self)
  return #self._inflight - self._head + 1
end

--- pipe:synchronize(): wait for every pushed request.
function Pipeline:synchronize()
  check_open(self, "Pipeline:synchronize")
  if self.is_cuda then
    self.copy_in:synchronize()
    for _, s in ipairs(self.compute) do s:synchronize() end
    self.copy_out:synchronize()
    poll(self)
  end
  return self
end

--- pipe:close(): waits for the pushed work, then closes the programs or
--- buffers the pipeline created (programs given to it stay open).
--- Idempotent; any other use afterwards is an ExecutionError.
function Pipeline:close()
  if getmetatable(self) ~= PipelineMT then
    raise("TypeError", ("Pipeline:close: expected a pipeline, got %s"):format(type(self)), 2)
  end
  if self._closed then return end
  self:synchronize()
  for _, o in ipairs(self._owned) do o:close() end
  self._owned = {}
  self._closed = true
end

function Pipeline:is_closed() return self._closed end

-- pipe.stats: requests pushed, results taken, requests in flight, pushes
-- per slot and per compute stream, host seconds spent in push
local function stats(self)
  local per_slot, per_stream = {}, {}
  for k, s in ipairs(self.slots) do
    per_slot[k] = s.pushes
    per_stream[s.stream_index] = (per_stream[s.stream_index] or 0) + s.pushes
  end
  return { requests = self._pushed, results_taken = self._taken,
    in_flight = self._closed and 0 or Pipeline.in_flight(self), slots = self.nslots, compute_streams = self.nstreams,
    per_slot = per_slot, per_stream = per_stream, push_seconds = self._push_seconds }
end

PipelineMT.__index = function(self, k)
  if k == "stats" then return stats(self) end
  return Pipeline[k]
end

--- pipe:measure(requests) -> {copy_in=, compute=, copy_out=, serial=, bound=}
--- (seconds): each stage alone over every request, waited for before the
--- next stage, on the pipeline's own streams, slots and programs: the
--- copies into the slots, then the computations on what the slots hold
--- (each slot on its compute stream, so several streams run together),
--- then the read-backs of the slots' outputs. serial = the sum; bound =
--- max(copy_in + copy_out, compute), what perfect overlap could reach
--- with the copies sharing one link. Results are not kept. On a GPU the
--- read-backs run once untimed first, so that the pinned host memory they
--- need exists (the first cudaHostAlloc of a block pins its pages, far
--- slower than the copy), and garbage is collected before each timed stage
--- so that dropped results give their memory back: the figures are those
--- of a pipeline in its steady state.
function Pipeline:measure(requests)
  check_open(self, "Pipeline:measure")
  if type(requests) ~= "table" or #requests == 0 then
    raise("TypeError", ("Pipeline:measure: argument 1 (requests) expected a non-empty list of input lists, got %s")
      :format(type(requests)), 2)
  end
  self:synchronize()
  collectgarbage("collect")
  local C = self.is_cuda and cuda() or nil
  local K = self.nslots
  local handles, outs = {}, {}
  local function sync_all() if C then self:synchronize() end end
  -- copy in
  local t0 = clock()
  for i = 1, #requests do
    local slot = self.slots[(i - 1) % K + 1]
    local o = C and { stream = self.copy_in, wait_for = slot.released } or nil
    if slot.program then
      handles[slot.index] = slot.program:copy_inputs_from(requests[i], o)
    else
      slot.buffer:copy_from(requests[i], o)
    end
  end
  if C then self.copy_in:synchronize() end
  local t_in = clock() - t0
  sync_all()
  -- compute
  t0 = clock()
  for i = 1, #requests do
    local slot = self.slots[(i - 1) % K + 1]
    local function step()
      if slot.program then
        local h = handles[slot.index]
        handles[slot.index] = nil
        return slot.program:replay_prepared(h and { copy_handle = h } or nil)
      end
      return eager_output(self, "Pipeline:measure", slot)
    end
    if C then
      outs[slot.index] = C.with_stream(slot.stream, step)
    else
      outs[slot.index] = step()
    end
  end
  if C then for _, s in ipairs(self.compute) do s:synchronize() end end
  local t_compute = clock() - t0
  sync_all()
  -- copy out
  local function copy_out()
    for i = 1, #requests do
      local slot = self.slots[(i - 1) % K + 1]
      local out = outs[slot.index]
      if out ~= nil then
        if C then
          core.tree_copy_to(out, { device = "cpu", pin_memory = true, stream = self.copy_out })
        else
          core.tree_copy_to(out, { device = "cpu" })
        end
      end
    end
  end
  if C then
    copy_out() -- untimed: the pinned blocks the read-backs need
    self.copy_out:synchronize()
    collectgarbage("collect")
  end
  t0 = clock()
  copy_out()
  if C then
    self.copy_out:synchronize()
    for _, slot in ipairs(self.slots) do slot.released = nil end -- everything has completed
  end
  local t_out = clock() - t0
  return { copy_in = t_in, compute = t_compute, copy_out = t_out, serial = t_in + t_compute + t_out,
    bound = math.max(t_in + t_out, t_compute) }
end

function PipelineMT.__tostring(self)
  if self._closed then return "fhelium.Pipeline(closed)" end
  local inflight = self.is_cuda and (", %d in flight"):format(self:in_flight()) or ""
  return ("fhelium.Pipeline(device=%s, %d slots of %s, %d compute stream%s, %d requests%s)"):format(self.device,
    self.nslots, self.capture and (self.is_cuda and "CudaGraphProgram" or "HostGraphProgram") or "buffers (eager)",
    self.nstreams, self.nstreams == 1 and "" or "s", self._pushed, inflight)
end

-- ---- requests ------------------------------------------------------------------------------
local function check_request(self, fn)
  if getmetatable(self) ~= Request then
    raise("TypeError", ("Request:%s: expected a pipeline request (call it as req:%s()), got %s"):format(fn, fn,
      type(self)), 3)
  end
end

--- req:done(): true once the result is on the host (never blocks).
function Request:done()
  check_request(self, "done")
  if self._event == nil then return true end
  return self._event:query()
end

--- req:wait(): block until the result is on the host; returns req.
function Request:wait()
  check_request(self, "wait")
  if self._event ~= nil then
    self._event:synchronize()
    self._event = nil
  end
  return self
end

--- req:result(): the request's output tree on the host (pinned memory for a
--- CUDA pipeline), owned by the caller; blocks until it has arrived. The
--- same tree on every call.
function Request:result()
  check_request(self, "result")
  local first = not self._taken
  self:wait()
  if first then
    self._taken = true
    self.pipeline._taken = self.pipeline._taken + 1
  end
  return self._result
end

function Request:__tostring()
  local state = self._event == nil and "complete" or (self._event:query() and "complete" or "pending")
  return ("fhelium.PipelineRequest(%d on %s, slot %d, compute stream %d, %s)"):format(self.index,
    self.pipeline.device, self.slot, self.stream, state)
end

return M
