-- fh.pipeline (docs/pipeline.md): a ring of slots, each an input set with its
-- own program, over copy-in, compute and copy-out streams.
--
-- The CPU twin (CI): the same pipeline with HostGraphProgram slots gives,
-- over many requests and K = 2, 3, exactly what eager evaluation of the
-- function gives (tensor programs and the CKKS matrix-vector program of
-- examples/matvec.lua); bad configurations raise clear errors; a failed push
-- changes nothing. The gpu-tagged specs check the ordering itself: with a
-- kernel lengthened by fh.cuda._spin, the next copy into a slot never
-- overwrites data its previous compute still reads, nor the output its
-- previous read-back still reads (and a negative control shows the same run
-- does go wrong when the pipeline skips its consumer wait); results equal
-- eager ones; several compute streams give what one gives.
local fh = require "fhelium"
local ex = require "fhelium.execution"
local H = require "spec.helpers"
local cli = require "spec.support.cli"
local matvec = dofile(cli.root .. "/examples/matvec.lua")

local function tensor_fn(x, w)
  return { y = x * w + 1, s = fh.sum(x), z = ex.tuple(x - w, w * 2) }
end

local function same_tree(a, b, what)
  if fh.is_tensor(a) then
    assert(fh.is_tensor(b), what .. ": not a tensor")
    assert(fh.equal(a, b), what .. ": tensors differ")
    return
  end
  if type(a) == "userdata" then -- a CKKS value
    assert.equal(a.level, b.level, what .. ".level")
    assert.equal(a.scale, b.scale, what .. ".scale")
    assert(fh.equal(a.data, b.data:to(a.device)), what .. ".data differs")
    return
  end
  for k, v in pairs(a) do same_tree(v, b[k], what .. "[" .. tostring(k) .. "]") end
  for k in pairs(b) do assert(a[k] ~= nil, what .. ": extra key " .. tostring(k)) end
end

local function tensor_requests(n, seed, device)
  local g = fh.Generator(seed)
  local reqs = {}
  for i = 1, n do
    local x = fh.randn({ 3, 5 }, { generator = g, dtype = "float64" })
    local w = fh.randn({ 3, 5 }, { generator = g, dtype = "float64" })
    if device then x, w = x:to(device), w:to(device) end
    reqs[i] = { x, w }
  end
  return reqs
end

local function small_engine(device, seed)
  return fh.CkksEngine({ log_n = 10, q_bits = { 40, 40, 40, 60 }, p_bits = { 60 }, scale = 2 ^ 40,
    allow_insecure = true }, { seed = seed, device = device })
end

describe("fh.pipeline on the cpu (the CPU twin)", function()
  for _, K in ipairs { 2, 3 } do
    it(("gives eager evaluation's results over many requests with K = %d (captured slots)"):format(K), function()
      local reqs = tensor_requests(23, H.seed("pipeline tensors K=" .. K))
      local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = K })
      assert.equal("cpu", pipe.device)
      assert.equal(K, pipe.nslots)
      local pending = {}
      for i, r in ipairs(reqs) do
        pending[i] = pipe:push(r)
        assert.equal((i - 1) % K + 1, pending[i].slot)
        assert.is_true(pending[i]:done())
      end
      for i, r in ipairs(reqs) do
        local got = pending[i]:result()
        same_tree(tensor_fn(r[1], r[2]), got, "request " .. i)
        assert.equal(got, pending[i]:result()) -- the same tree every time
      end
      local st = pipe.stats
      assert.equal(23, st.requests)
      assert.equal(23, st.results_taken)
      assert.equal(0, st.in_flight)
      local per = 0
      for k = 1, K do per = per + st.per_slot[k] end
      assert.equal(23, per)
      for k = 1, K do assert.is_true(pipe.slots[k].program:is_closed() == false) end
      pipe:close()
      for k = 1, K do assert.is_true(pipe.slots[k].program:is_closed()) end
    end)
  end

  it("gives eager results with capture = false (slots are buffers, fn runs eagerly)", function()
    local reqs = tensor_requests(9, H.seed("pipeline eager"))
    local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = 2, capture = false })
    assert.is_false(pipe.capture)
    local results = pipe:run(reqs)
    for i, r in ipairs(reqs) do same_tree(tensor_fn(r[1], r[2]), results[i], "request " .. i) end
    pipe:close()
  end)

  for _, K in ipairs { 2, 3 } do
    it(("runs the CKKS matrix-vector program bit for bit like eager evaluation, K = %d"):format(K), function()
      local seed = H.seed("pipeline ckks K=" .. K)
      local engine = small_engine("cpu", seed)
      local size = 4
      local sk = engine:create_secret_key()
      local pk = engine:create_public_key(sk)
      matvec.create_keys(engine, sk, size)
      local gen = fh.Generator(seed)
      local m = matvec.matrix(gen, size)
      local program = matvec.program(engine, m, size)
      local vs, reqs = {}, {}
      for i = 1, 2 * K + 1 do
        vs[i] = matvec.uniform(gen, size)
        reqs[i] = { matvec.encrypt_vector(engine, pk, vs[i], size) }
      end
      local pipe = fh.pipeline(program, { example_inputs = reqs[1], slots = K })
      local results = pipe:run(reqs)
      for i = 1, #reqs do
        local eager = program(reqs[i][1])
        same_tree(eager, results[i], "request " .. i)
        local err = matvec.max_error(engine, sk, results[i], matvec.reference(m, vs[i], size), size)
        assert(err < 1e-4, ("request %d: error %g"):format(i, err))
      end
      pipe:close()
    end)
  end

  it("takes programs captured by the caller (one per slot) and leaves them open", function()
    local reqs = tensor_requests(5, 7)
    local progs = {}
    for k = 1, 2 do progs[k] = ex.HostGraphProgram.capture(tensor_fn, { example_inputs = reqs[1], warmup = 0 }) end
    local pipe = fh.pipeline(progs)
    assert.equal(2, pipe.nslots)
    local results = pipe:run(reqs)
    for i, r in ipairs(reqs) do same_tree(tensor_fn(r[1], r[2]), results[i], "request " .. i) end
    pipe:close()
    assert.is_false(progs[1]:is_closed())
    progs[1]:close()
    progs[2]:close()
  end)

  it("measures each stage alone", function()
    local reqs = tensor_requests(6, 3)
    local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = 2, compute_streams = 2 })
    assert.equal(2, pipe.nstreams)
    local m = pipe:measure(reqs)
    for _, k in ipairs { "copy_in", "compute", "copy_out" } do assert.is_true(m[k] > 0, k) end
    assert.near(m.copy_in + m.compute + m.copy_out, m.serial, 1e-12)
    assert.equal(math.max(m.copy_in + m.copy_out, m.compute), m.bound)
    -- the pipeline still computes correctly afterwards
    local r = pipe:push(reqs[4]):result()
    same_tree(tensor_fn(reqs[4][1], reqs[4][2]), r, "after measure")
    pipe:close()
  end)

  it("prints itself and its requests in one line", function()
    local reqs = tensor_requests(3, 5)
    local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = 3 })
    assert.equal("fhelium.Pipeline(device=cpu, 3 slots of HostGraphProgram, 1 compute stream, 0 requests)",
      tostring(pipe))
    local req = pipe:push(reqs[2])
    assert.equal("fhelium.PipelineRequest(1 on cpu, slot 1, compute stream 1, complete)", tostring(req))
    assert.equal("fhelium.Pipeline(device=cpu, 3 slots of HostGraphProgram, 1 compute stream, 1 requests)",
      tostring(pipe))
    pipe:close()
    assert.equal("fhelium.Pipeline(closed)", tostring(pipe))
    local pe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], capture = false, compute_streams = 2 })
    assert.equal("fhelium.Pipeline(device=cpu, 2 slots of buffers (eager), 2 compute streams, 0 requests)",
      tostring(pe))
    pe:close()
  end)

  it("a failed push changes nothing: the next push takes the same slot", function()
    local reqs = tensor_requests(3, 9)
    local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = 2 })
    local bad = { fh.zeros({ 2, 2 }, { dtype = "float64" }), reqs[1][2] }
    local err = H.expect_error("CudaGraphInputError", { "^Pipeline:push: ", "inputs%[1%]" }, pipe.push, pipe, bad)
    assert.equal("inputs[1]", err.path)
    H.expect_error("TypeError", "Pipeline:push: argument 1 %(inputs%) is missing", pipe.push, pipe)
    assert.equal(0, pipe.stats.requests)
    local req = pipe:push(reqs[2])
    assert.equal(1, req.index)
    assert.equal(1, req.slot)
    same_tree(tensor_fn(reqs[2][1], reqs[2][2]), req:result(), "after the failed push")
    pipe:close()
    pipe:close() -- harmless
    H.expect_error("ExecutionError", "Pipeline:push: the pipeline is closed", pipe.push, pipe, reqs[1])
    H.expect_error("ExecutionError", "Pipeline:measure: the pipeline is closed", pipe.measure, pipe, reqs)
  end)

  it("raises clear errors for its methods' misuse, and run checks every request before pushing any", function()
    local reqs = tensor_requests(3, 13)
    local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = 2 })
    -- methods called without the pipeline or the request
    H.expect_error("TypeError", "Pipeline:push: expected a pipeline %(call it as pipe:push%(...%)%), got number",
      pipe.push, 42, reqs[1])
    H.expect_error("TypeError", "Pipeline:close: expected a pipeline, got number", pipe.close, 42)
    H.expect_error("TypeError", "Pipeline:measure: argument 1 %(requests%) expected a non%-empty list of input lists, "
      .. "got table", pipe.measure, pipe, {})
    H.expect_error("TypeError", "Pipeline:measure: argument 1 %(requests%) expected a non%-empty list of input lists, "
      .. "got string", pipe.measure, pipe, "x")
    H.expect_error("TypeError", "Pipeline:run: argument 1 %(requests%) expected a list of input lists, got string",
      pipe.run, pipe, "x")
    local req = pipe:push(reqs[1])
    for _, m in ipairs { "result", "wait", "done" } do
      H.expect_error("TypeError", ("Request:%s: expected a pipeline request %%(call it as req:%s%%(%%)%%), got number")
        :format(m, m), req[m], 42)
    end
    assert.equal(1, pipe.stats.requests)
    -- run: a bad request anywhere raises, naming it, before anything is pushed
    local bad = { reqs[2][1], fh.zeros({ 2, 2 }, { dtype = "float64" }) }
    local err = H.expect_error("CudaGraphInputError", "^Pipeline:run: requests%[3%]%[2%]: tensor shape mismatch",
      pipe.run, pipe, { reqs[2], reqs[3], bad })
    assert.equal("requests[3][2]", err.path)
    H.expect_error("TypeError", "^Pipeline:run: requests%[2%]: unsupported leaf: a number", pipe.run, pipe,
      { reqs[2], 5 })
    assert.equal(1, pipe.stats.requests)
    local results = pipe:run({ reqs[2], reqs[3] })
    same_tree(tensor_fn(reqs[3][1], reqs[3][2]), results[2], "run after the refused runs")
    assert.equal(3, pipe.stats.requests)
    pipe:close()
    -- eager slots (capture = false): the buffers' errors name the caller's inputs, and
    -- fn must return one tree
    local pe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], capture = false })
    err = H.expect_error("ExecutionInputError", "^Pipeline:push: inputs%[2%]: tensor shape mismatch", pe.push, pe, bad)
    assert.equal("inputs[2]", err.path)
    H.expect_error("ExecutionInputError", "^Pipeline:run: requests%[1%]%[2%]: tensor shape mismatch", pe.run, pe,
      { bad })
    pe:close()
    local two = fh.pipeline(function(x, w) return x + w, x - w end, { example_inputs = reqs[1], capture = false })
    H.expect_error("ValueError", "^Pipeline:push: fn returned 2 values; return one output tree", two.push, two, reqs[1])
    assert.equal(0, two.stats.requests)
    two:close()
  end)

  it("refuses to run inside a captured function", function()
    local reqs = tensor_requests(2, 11)
    local pipe = fh.pipeline(tensor_fn, { example_inputs = reqs[1], slots = 2 })
    local err = H.expect_error("CudaGraphCaptureError", "capture failed", ex.HostGraphProgram.capture,
      function(x, w) pipe:push({ x, w }) return x end, { example_inputs = reqs[1], warmup = 0 })
    assert.matches("Pipeline:push cannot run inside a function being captured", err.message)
    H.expect_error("CudaGraphCaptureError", "fh.pipeline cannot run inside a function being captured",
      ex.HostGraphProgram.capture, function(x)
        fh.pipeline(tensor_fn, { example_inputs = reqs[1] })
        return x
      end, { example_inputs = { reqs[1][1] }, warmup = 0 })
    pipe:close()
  end)

  describe("rejects bad configurations", function()
    local x = fh.ones({ 4 }, { dtype = "float64" })
    local function f(a) return a * 2 end
    local ok_opts = { example_inputs = { x } }
    local function with(extra)
      local o = { example_inputs = { x } }
      for k, v in pairs(extra) do o[k] = v end
      return o
    end

    it("arguments and options", function()
      H.expect_error("TypeError", "fh.pipeline: argument 1 %(fn%) expected a function, a callable table or a list "
        .. "of programs, got number", fh.pipeline, 42, ok_opts)
      H.expect_error("ValueError", "fh.pipeline: argument 1 is an empty list", fh.pipeline, {}, ok_opts)
      H.expect_error("TypeError", "fh.pipeline: argument 2 %(options%) expected a table, got string", fh.pipeline, f,
        "slots=2")
      H.expect_error("ValueError", "fh.pipeline: unknown option 'slot' %(expected example_inputs, slots,", fh.pipeline,
        f, with { slot = 2 })
      H.expect_error("ValueError", "fh.pipeline: example_inputs is required", fh.pipeline, f, {})
      H.expect_error("TypeError", "fh.pipeline: example_inputs must be a list of fn's arguments, got a tensor",
        fh.pipeline, f, { example_inputs = x })
      H.expect_error("TypeError", "fh.pipeline: capture expected a boolean, got string", fh.pipeline, f,
        with { capture = "yes" })
      H.expect_error("ValueError", "fh.pipeline: warmup must be an integer >= 0, got %-1", fh.pipeline, f,
        with { warmup = -1 })
    end)

    it("slots and streams", function()
      for _, bad in ipairs { 0, 1.5, 65, "2" } do
        H.expect_error("ValueError", "fh.pipeline: slots must be an integer in %[1, 64%], got " .. tostring(bad),
          fh.pipeline, f, with { slots = bad })
      end
      for _, bad in ipairs { 0, 2.5, 33 } do
        H.expect_error("ValueError", "fh.pipeline: compute_streams must be an integer in %[1, 32%], got "
          .. tostring(bad), fh.pipeline, f, with { compute_streams = bad })
      end
      H.expect_error("ValueError", "fh.pipeline: 4 compute streams need at least as many slots, got 2", fh.pipeline,
        f, with { compute_streams = 4 })
      H.expect_error("ValueError", "fh.pipeline: streams apply to CUDA pipelines; this pipeline runs on cpu",
        fh.pipeline, f, with { streams = { compute = {} } })
      H.expect_error("ValueError", "fh.pipeline: priority must be an integer", fh.pipeline, f, with { priority = 0.5 })
      H.expect_error("ValueError", "fh.pipeline: unknown priority 'compute_in'", fh.pipeline, f,
        with { priority = { compute_in = 1 } })
      H.expect_error("TypeError", "fh.pipeline: priority expected a number or a table", fh.pipeline, f,
        with { priority = "high" })
    end)

    it("devices", function()
      H.expect_error("ValueError", "fh.pipeline: invalid device string 'gpu' for device %(expected \"cpu\", \"cuda\" "
        .. "or \"cuda:N\"%)", fh.pipeline, f, with { device = "gpu" })
      H.expect_error("TypeError", "fh.pipeline: device expected a device string, got number", fh.pipeline, f,
        with { device = 0 })
      if not H.has_gpu then
        H.expect_error("CudaError", "fh.pipeline: the pipeline runs on cuda:0: no CUDA device is present",
          fh.pipeline, f, with { device = "cuda:0" })
      end
    end)

    it("programs: one per slot, each its own, same inputs, same device", function()
      local p1 = ex.HostGraphProgram.capture(f, { example_inputs = { x }, warmup = 0 })
      local p2 = ex.HostGraphProgram.capture(f, { example_inputs = { x }, warmup = 0 })
      local p3 = ex.HostGraphProgram.capture(f, { example_inputs = { fh.ones({ 5 }, { dtype = "float64" }) },
        warmup = 0 })
      H.expect_error("TypeError", "fh.pipeline: programs%[2%] %(slot 2%) expected a CudaGraphProgram or "
        .. "HostGraphProgram, got table", fh.pipeline, { p1, {} })
      H.expect_error("ValueError", "fh.pipeline: programs%[1%] and programs%[2%] are the same program; each slot "
        .. "needs its own program instance", fh.pipeline, { p1, p1 })
      H.expect_error("ValueError", "fh.pipeline: programs%[2%] %(slot 2%) takes other inputs than programs%[1%]",
        fh.pipeline, { p1, p3 })
      H.expect_error("ValueError", "fh.pipeline: programs%[1%] %(slot 1%) is a HostGraphProgram of cpu but the "
        .. "pipeline runs on cuda:0", fh.pipeline, { p1, p2 }, { device = "cuda:0" })
      H.expect_error("ValueError", "fh.pipeline: example_inputs applies when fn is captured; programs were given",
        fh.pipeline, { p1, p2 }, { example_inputs = { x } })
      H.expect_error("ValueError", "fh.pipeline: slots is 3 but 2 programs were given", fh.pipeline, { p1, p2 },
        { slots = 3 })
      H.expect_error("ValueError", "fh.pipeline: warmup applies when fn is captured", fh.pipeline, { p1, p2 },
        { warmup = 1 })
      H.expect_error("ValueError", "fh.pipeline: capture = false runs fn eagerly; programs were given", fh.pipeline,
        { p1, p2 }, { capture = false })
      p2:close()
      H.expect_error("ExecutionError", "fh.pipeline: programs%[2%] %(slot 2%) is closed", fh.pipeline, { p1, p2 })
      p1:close()
      p3:close()
    end)
  end)
end)

-- ---- GPU ---------------------------------------------------------------------------
local gpu_it, window_it = H.gpu_it, H.gpu_window_it

-- x * 2 read after a spin on the current stream: the kernel reads its
-- input `ms` after it starts
local function slow_double(ms)
  return function(x)
    fh.cuda._spin(ms)
    return x * 2
  end
end

local function host_requests(n, len)
  local reqs = {}
  for i = 1, n do reqs[i] = { fh.full({ len }, i, { dtype = "float64", pin_memory = true }) } end
  return reqs
end

-- the number of requests whose result is not 2 * i
local function wrong_results(results)
  local wrong = 0
  for i, r in ipairs(results) do
    local v = r:cpu():tolist()
    for _, e in ipairs(v) do
      if e ~= 2 * i then
        wrong = wrong + 1
        break
      end
    end
  end
  return wrong
end

describe("fh.pipeline on cuda:0", function()
  window_it("never copies into a slot while its previous compute still reads it (eager slots)", function()
    local reqs = host_requests(6, 1024)
    local pipe = fh.pipeline(slow_double(30), { example_inputs = reqs[1], slots = 2, capture = false,
      device = "cuda:0" })
    assert.equal(0, wrong_results(pipe:run(reqs)))
    pipe:close()
    -- the negative control: without the consumer wait the same run goes wrong
    local unsafe = fh.pipeline(slow_double(30), { example_inputs = reqs[1], slots = 2, capture = false,
      device = "cuda:0" })
    unsafe._skip_consumer_wait = true
    assert.is_true(wrong_results(unsafe:run(reqs)) > 0,
      "without its consumer wait the pipeline should overwrite a slot that the compute still reads")
    unsafe:close()
  end)

  window_it("never lets a replay overwrite the output its slot's previous read-back still reads", function()
    local reqs = host_requests(6, 1024)
    local function run(skip)
      local pipe = fh.pipeline(function(x) return x * 2 end, { example_inputs = reqs[1], slots = 2,
        device = "cuda:0" })
      pipe._skip_consumer_wait = skip
      fh.cuda._spin(40, pipe.copy_out) -- every read-back waits behind it
      local results = pipe:run(reqs)
      pipe:close()
      return wrong_results(results)
    end
    assert.equal(0, run(false))
    assert.is_true(run(true) > 0, "without its consumer wait a replay should overwrite an output before its read-back")
  end)

  window_it("with a lengthened captured kernel, every copy into a slot still follows the slot's last reader",
    function()
      local reqs = host_requests(8, 4096)
      local pipe = fh.pipeline(slow_double(20), { example_inputs = reqs[1], slots = 2, device = "cuda:0" })
      local t0 = fh.core.exec_clock()
      local pending = {}
      for i, r in ipairs(reqs) do pending[i] = pipe:push(r) end
      local host = fh.core.exec_clock() - t0
      assert.is_true(host < 0.1, ("pushing 8 requests of 20 ms each took %.3f s of host time"):format(host))
      assert.is_false(pending[8]:done(), "push should not wait for the work")
      local results = {}
      for i = 1, #pending do results[i] = pending[i]:result() end
      assert.equal(0, wrong_results(results))
      assert.equal("cpu", results[1].device)
      assert.is_true(results[1]:is_pinned())
      pipe:close()
    end)

  gpu_it("gives eager results with K = 2, 3 and 1, 2, 4 compute streams, the same for every stream count",
    function()
      local seed = H.seed("pipeline cuda ckks")
      local engine = small_engine("cuda:0", seed)
      local host = small_engine("cpu", seed + 1)
      local size = 4
      local sk = host:create_secret_key()
      local pk = host:create_public_key(sk)
      matvec.create_keys(engine, sk, size)
      local gen = fh.Generator(seed)
      local m = matvec.matrix(gen, size)
      local program = matvec.program(engine, m, size)
      local vs, reqs = {}, {}
      for i = 1, 9 do
        vs[i] = matvec.uniform(gen, size)
        reqs[i] = ex.pin_value_tree({ matvec.encrypt_vector(host, pk, vs[i], size) })
      end
      local first
      for _, cfg in ipairs { { 2, 1 }, { 3, 1 }, { 2, 2 }, { 4, 4 } } do
        local pipe = fh.pipeline(program, { example_inputs = reqs[1], slots = cfg[1], compute_streams = cfg[2],
          device = "cuda:0" })
        local results = pipe:run(reqs)
        for i = 1, #reqs do
          local eager = program(reqs[i][1]:to("cuda:0"))
          same_tree(eager, results[i], ("K=%d S=%d request %d"):format(cfg[1], cfg[2], i))
          local err = matvec.max_error(host, sk, results[i], matvec.reference(m, vs[i], size), size)
          assert(err < 1e-4, ("request %d: error %g"):format(i, err))
          if first then same_tree(first[i], results[i], "against one stream, request " .. i) end
        end
        first = first or results
        pipe:close()
      end
    end)

  gpu_it("runs each slot on its own compute stream, with the priorities asked for", function()
    local least, greatest = fh.cuda.stream_priority_range(0)
    local reqs = host_requests(4, 64)
    local pipe = fh.pipeline(function(x) return x * 2 end, { example_inputs = reqs[1], slots = 4,
      compute_streams = 2, device = "cuda:0", priority = { copy_in = greatest, compute = least, copy_out = greatest } })
    assert.equal(greatest, pipe.copy_in.priority)
    assert.equal(least, pipe.compute[1].priority)
    assert.equal("copy-in", pipe.copy_in.name)
    assert.equal("compute 2", pipe.compute[2].name)
    assert.equal(pipe.compute[1], pipe.slots[3].stream)
    assert.equal(pipe.compute[2], pipe.slots[2].stream)
    assert.equal(0, wrong_results(pipe:run(reqs)))
    assert.matches("^fhelium%.Pipeline%(device=cuda:0, 4 slots of CudaGraphProgram, 2 compute streams, 4 requests, "
      .. "0 in flight%)$", tostring(pipe))
    pipe:close()
  end)

  gpu_it("rejects streams and programs of another device, and one stream in two roles", function()
    local x = fh.ones({ 4 }, { dtype = "float64" })
    local f = function(a) return a * 2 end
    local s = fh.cuda.Stream {}
    H.expect_error("ValueError", "fh.pipeline: streams.copy_in and streams.compute%[2%] are the same stream",
      fh.pipeline, f, { example_inputs = { x }, device = "cuda:0", slots = 2,
        streams = { copy_in = s, compute = { fh.cuda.Stream {}, s } } })
    H.expect_error("TypeError", "fh.pipeline: streams.copy_out expected a fh.cuda.Stream, got number", fh.pipeline,
      f, { example_inputs = { x }, device = "cuda:0", streams = { copy_out = 3 } })
    H.expect_error("TypeError", "fh.pipeline: streams expected a table {copy_in=, compute=, copy_out=}, got number",
      fh.pipeline, f, { example_inputs = { x }, device = "cuda:0", streams = 3 })
    H.expect_error("ValueError", "fh.pipeline: unknown stream role 'copyin' %(expected copy_in, compute, copy_out%)",
      fh.pipeline, f, { example_inputs = { x }, device = "cuda:0", streams = { copyin = s } })
    H.expect_error("TypeError", "fh.pipeline: streams.compute expected a stream or a non%-empty list of streams, got "
      .. "table", fh.pipeline, f, { example_inputs = { x }, device = "cuda:0", streams = { compute = {} } })
    H.expect_error("ValueError", "fh.pipeline: compute_streams is 1 but streams.compute holds 2 streams",
      fh.pipeline, f, { example_inputs = { x }, device = "cuda:0", slots = 2, compute_streams = 1,
        streams = { compute = { fh.cuda.Stream {}, fh.cuda.Stream {} } } })
    local hp = ex.HostGraphProgram.capture(f, { example_inputs = { x }, warmup = 0 })
    local cp = ex.CudaGraphProgram.capture(f, { example_inputs = { x:cuda() }, warmup = 0 })
    H.expect_error("ValueError", "fh.pipeline: programs%[2%] %(slot 2%) runs on cpu but programs%[1%] on cuda:0",
      fh.pipeline, { cp, hp })
    hp:close()
    cp:close()
    if fh.cuda.device_count() >= 2 then
      H.expect_error("ValueError", "fh.pipeline: streams.copy_in is a stream of cuda:1 but the pipeline runs on "
        .. "cuda:0", fh.pipeline, f, { example_inputs = { x }, device = "cuda:0",
          streams = { copy_in = fh.cuda.Stream { device = 1 } } })
      local other = ex.CudaGraphProgram.capture(f, { example_inputs = { x:cuda(1) }, warmup = 0 })
      H.expect_error("ValueError", "fh.pipeline: programs%[1%] %(slot 1%) is a CudaGraphProgram of cuda:1 but the "
        .. "pipeline runs on cuda:0", fh.pipeline, { other }, { device = "cuda:0" })
      other:close()
    end
  end)
end)
