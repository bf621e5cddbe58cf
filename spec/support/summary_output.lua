-- busted output handler: the usual terminal report, then the plain closing
-- line "N passed, N failed, N skipped" (skipped = pending specs, e.g. gpu
-- specs on a machine without a GPU; their reasons are listed above it).
return function(options)
  local busted = require "busted"
  local istty = os.getenv("TERM") and os.getenv("TERM") ~= "dumb" and os.getenv("CI") == nil
  local base = istty and "utfTerminal" or "plainTerminal"
  local handler = require("busted.outputHandlers." .. base)(options)
  local subscribe = handler.subscribe
  handler.subscribe = function(self, opts)
    subscribe(self, opts)
    busted.subscribe({ "suite", "end" }, function()
      local failed = handler.failuresCount + handler.errorsCount
      io.write(("\n%d passed, %d failed, %d skipped\n"):format(handler.successesCount, failed,
        handler.pendingsCount))
      io.flush()
      return nil, true
    end, { priority = 100 })
  end
  return handler
end
