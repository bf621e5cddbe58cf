--[[ examples/double_buffering.lua: moving payloads into fixed-address buffers
while the GPU computes on the previous ones.

    fhelium examples/double_buffering.lua        (or: scripts/run examples/double_buffering.lua)

ReusableValueBuffer
-------------------
ex.ReusableValueBuffer.like(example, {device=, pin_memory=}) allocates a tree
shaped exactly like `example` (containers, CKKS values with their exact state,
tensor shapes, dtypes and strides) on one device, initialised with a copy of
it. Its storage never moves: buf.value rebuilds ordinary tensors and values
around the same addresses on every access, so any operator, and any captured
program, can use them. buf:copy_from(source, {stream=, non_blocking=true,
wait_for=}) validates the whole source tree against buf.signature first
(structure, shapes, strides, dtypes, exact CKKS state) and raises
ExecutionInputError, naming the path, before a single byte moves. Sources may
be pageable or pinned host memory or CUDA memory, in any mix.

The ordering contract (CUDA targets)
------------------------------------
copy_from enqueues the copy on `stream` (default: the current stream of the
buffer's device), after the events in `wait_for` and after this buffer's own
earlier copies, and returns a CopyHandle whose `event` is recorded after the
last byte.

  * The handle's event proves that the NEW payload is in the buffer. A reader
    on another stream calls h:wait_on(reader_stream) (or
    buf:wait_for(h, reader_stream)) before using buf.value; the host is not
    blocked.
  * The event does NOT prove that an EARLIER reader has finished reading the
    OLD payload. copy_from cannot know who reads the buffer, so the caller
    passes, as wait_for, an event recorded on the reader's stream after its
    last read. Without it, a copy can overwrite data a kernel is still reading.
  * The handle keeps the exact source tensors alive until its event completes
    (h:done(), h:synchronize()), even if the caller drops the source tree and
    the GC runs; the buffer keeps its in-flight copies, and buf:close() waits
    for them before releasing the storage.
  * CPU targets copy synchronously: the handle has no event, and passing a
    stream or wait_for is a ValueError.

Double buffering
----------------
With two buffers A and B, tile i is copied into buffer i % 2 on a transfer
stream while the compute stream works on the other buffer:

    copy i   waits for  "compute i-2 finished reading this buffer"  (wait_for)
    compute i waits for "copy i landed"                               (wait_on)

so copies and compute overlap, and neither overtakes the other. The loop
below does exactly that; each compute step records `read_done[k]`, the event
the next copy into buffer k waits for.
]]
local fh = require "fhelium"
local ex = require "fhelium.execution"

local cuda = fh.cuda.is_available()
local device = cuda and "cuda:0" or "cpu"
local TILES, N = 8, 2 ^ 20 -- 1 Mi float32 per tile

-- tiles to stream in: pinned host memory makes the copies asynchronous DMA
local tiles = {}
for i = 1, TILES do
  tiles[i] = { x = fh.full({ N }, i, { pin_memory = cuda }), scale = fh.full({ 1 }, 0.5, { pin_memory = cuda }) }
end

local bufs = {
  ex.ReusableValueBuffer.like(tiles[1], { device = device }),
  ex.ReusableValueBuffer.like(tiles[1], { device = device }),
}
local transfer = cuda and fh.cuda.Stream() or nil
local compute = cuda and fh.cuda.Stream() or nil

local function on_compute(f)
  if compute then return fh.cuda.with_stream(compute, f) end
  return f()
end

local read_done = {} -- read_done[k]: compute finished reading buffer k
local results = {}
for i = 1, TILES do
  local k = (i - 1) % 2 + 1
  local buf = bufs[k]
  local h
  if cuda then
    h = buf:copy_from(tiles[i], { stream = transfer, wait_for = read_done[k] })
    h:wait_on(compute) -- the compute stream waits; the host does not
  else
    h = buf:copy_from(tiles[i]) -- a cpu target: complete on return
  end
  results[i] = on_compute(function()
    local v = buf.value
    return fh.sum(v.x * v.scale)
  end)
  if cuda then read_done[k] = compute:record_event() end
end
if compute then compute:synchronize() end

for i = 1, TILES do
  local got, want = results[i]:item(), i * N * 0.5
  assert(math.abs(got - want) <= 1e-6 * want, ("tile %d: got %g, want %g"):format(i, got, want))
end
for _, b in ipairs(bufs) do b:close() end
print(("double buffering on %s: %d tiles of %d elements, every result checked"):format(device, TILES, N))
