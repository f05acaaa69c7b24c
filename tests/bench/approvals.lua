-- approvals.lua — wrk script for tests/bench/approvals.sh: the approval page
-- and the approve POST through nginx.
--
--   wrk -t2 -c16 -d20s --latency -s approvals.lua URL -- page SUBJECT GROUPS TOKENS
--   wrk -t16 -c16 -d1h -s approvals.lua URL -- decide SUBJECT GROUPS FORMS DONE THREADS
--   wrk -t2 -c16 -d20s --latency -s approvals.lua URL -- static SUBJECT GROUPS PATH
--
-- The signed-in person is SUBJECT with groups GROUPS, sent as X-Dev-User and
-- X-Dev-Groups (the local nginx's stand-in for SSO).
--
-- page    GET /approve/TOKEN round-robin over the tokens of the file TOKENS
--         (one a line), each thread from its own place; every answer must be
--         200 with the approval card (its form's csrf field).
-- static  GET PATH, a static copy of a card that nginx serves itself (the
--         baseline of the page run): the same headers, the same check.
-- decide  POST /approve/TOKEN with decision=approve&csrf=CSRF&reason=bench
--         for every line "TOKEN CSRF" of the file FORMS exactly once: thread
--         I of THREADS takes lines I, I+THREADS, I+2*THREADS, … Needs one
--         connection per thread (-c = -t = THREADS), so that a thread's
--         requests and answers alternate: on the answer to its last line the
--         thread appends a line to the file DONE and stops
--         (wrk.thread:stop()), so nothing is sent twice. wrk itself runs
--         until -d ends or SIGINT: approvals.sh interrupts it once DONE has
--         THREADS lines. Every answer must be 303 to the same page. wrk's
--         own duration and latency histogram would include the idle time
--         after the last answer, so this mode measures for itself
--         (CLOCK_MONOTONIC through LuaJIT's ffi): the duration from the first
--         request sent to the last answer received, and each request's
--         latency.
--
-- Tokens are capabilities: they come from files (mode 600, written by
-- approvals.sh), never from the command line, and are never printed — not
-- even in the sample of a wrong answer. done() prints the answers by status,
-- one sample of a wrong answer and a machine-readable line for approvals.sh:
--   bench-result requests=R duration_us=D p50_us=P p99_us=Q bad=B errors=E
-- where errors are wrk's socket errors (connect, read, write, timeout).

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } og_bench_timespec;
int clock_gettime(int clk_id, og_bench_timespec *tp);
]]
local CLOCK_MONOTONIC = 1
local ts = ffi.new("og_bench_timespec")

local function now_us()
	ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
	return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000
end

-- setup() and the threads done() reads (wrklib.lua, beside this script)
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "wrklib.lua")

-- Per thread. The globals are read by done() (main state) with thread:get().
local done_path
local tokens, forms = {}, {}
local n, pos, current, sent_at = 0, 0, nil, 0
local verified = false
mode, bad, sample, statuses = nil, 0, "", {}
first_us, last_us, answered, lat = nil, nil, 0, {}

local function read_lines(path)
	local f, err = io.open(path, "r")
	if f == nil then
		error("cannot read " .. path .. ": " .. tostring(err))
	end
	local lines = {}
	for line in f:lines() do
		if line ~= "" then
			lines[#lines + 1] = line
		end
	end
	f:close()
	return lines
end

function init(args)
	mode = args[1]
	local subject, groups = args[2], args[3]
	if (mode ~= "page" and mode ~= "decide" and mode ~= "static") or subject == nil or groups == nil
			or args[4] == nil then
		error("usage: -- page SUBJECT GROUPS TOKENS | -- decide SUBJECT GROUPS FORMS DONE THREADS"
			.. " | -- static SUBJECT GROUPS PATH")
	end
	wrk.headers["X-Dev-User"] = subject
	wrk.headers["X-Dev-Groups"] = groups
	-- ./dev up's approval pages also want the stack's key (.dev/env)
	local dev_key = os.getenv("ONCEGATE_DEV_KEY")
	if dev_key ~= nil and dev_key ~= "" then
		wrk.headers["X-Dev-Key"] = dev_key
	end
	if mode == "static" then
		wrk.method = "GET"
		wrk.path = args[4]
		return
	end
	if mode == "page" then
		wrk.method = "GET"
		tokens = read_lines(args[4])
		if #tokens == 0 then
			error("page: no tokens in " .. args[4])
		end
		-- Threads start at different places in the pool.
		n = ((id - 1) * 7919) % #tokens
		return
	end
	done_path = args[5]
	local nthreads = tonumber(args[6])
	if done_path == nil or nthreads == nil or id > nthreads then
		error("decide: DONE and THREADS (= wrk -t) are required")
	end
	wrk.method = "POST"
	wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
	wrk.headers["Sec-Fetch-Site"] = "same-origin"
	local all = read_lines(args[4])
	for i = id, #all, nthreads do
		local tok, csrf = string.match(all[i], "^([A-Za-z0-9_-]+) ([A-Za-z0-9_-]+)$")
		if tok == nil then
			error("decide: line " .. i .. " of the forms file is not \"TOKEN CSRF\"")
		end
		forms[#forms + 1] = { tok, csrf }
	end
	if #forms == 0 then
		error("decide: thread " .. id .. " has no tokens (fewer tokens than threads)")
	end
end

local function decide_request(form)
	return wrk.format(nil, "/approve/" .. form[1], nil,
		"decision=approve&csrf=" .. form[2] .. "&reason=bench")
end

function request()
	if mode == "static" then
		return wrk.format()
	end
	if mode == "page" then
		n = n % #tokens + 1
		return wrk.format(nil, "/approve/" .. tokens[n])
	end
	-- wrk calls request() once in thread 1 before the run starts, only to
	-- check that the request parses (script_verify_request): answer it
	-- without using up a token.
	if id == 1 and not verified then
		verified = true
		return decide_request(forms[1])
	end
	-- After a socket error wrk reconnects and asks again: send the last
	-- form again (it is refused and counted as a wrong answer).
	if pos < #forms then
		pos = pos + 1
	end
	current = forms[pos][1]
	sent_at = now_us()
	if first_us == nil then
		first_us = sent_at
	end
	return decide_request(forms[pos])
end

local function wrong(status, what)
	bad = bad + 1
	if sample == "" then
		sample = status .. " " .. what
	end
end

function response(status, headers, body)
	local key = tostring(status)
	statuses[key] = (statuses[key] or 0) + 1
	if mode == "page" or mode == "static" then
		if status ~= 200 or not string.find(body, 'name="csrf"', 1, true) then
			wrong(status, string.sub(body, 1, 300))
		end
		return
	end
	local t = now_us()
	lat[#lat + 1] = t - sent_at
	last_us = t
	answered = answered + 1
	if status ~= 303 then
		wrong(status, string.sub(body, 1, 300))
	elseif headers["Location"] ~= "/approve/" .. current then
		wrong(status, "Location is not the approval page")
	end
	if answered >= #forms then
		local f = io.open(done_path, "a")
		if f ~= nil then
			f:write(id, "\n")
			f:close()
		end
		wrk.thread:stop()
	end
end

function done(summary, latency, requests)
	local total_bad, first, by_status = 0, "", {}
	local decide = threads[1]:get("mode") == "decide"
	local all_lat, t0, t1, got = {}, nil, nil, 0
	for _, t in ipairs(threads) do
		total_bad = total_bad + t:get("bad")
		local s = t:get("sample")
		if first == "" and s ~= nil then first = s end
		for code, count in pairs(t:get("statuses") or {}) do
			by_status[code] = (by_status[code] or 0) + count
		end
		if decide then
			got = got + t:get("answered")
			for _, v in ipairs(t:get("lat") or {}) do
				all_lat[#all_lat + 1] = v
			end
			local a, b = t:get("first_us"), t:get("last_us")
			if a ~= nil and (t0 == nil or a < t0) then t0 = a end
			if b ~= nil and (t1 == nil or b > t1) then t1 = b end
		end
	end
	local codes = {}
	for code, count in pairs(by_status) do
		codes[#codes + 1] = code .. "=" .. count
	end
	table.sort(codes)
	io.write("answers by status: " .. (#codes > 0 and table.concat(codes, " ") or "none") .. "\n")
	io.write(string.format("unexpected answers (want %s): %d\n",
		decide and "303 to the page" or "200 with the card", total_bad))
	if first ~= "" then
		io.write("first unexpected answer: " .. first .. "\n")
	end
	local e = summary.errors
	local errors = e.connect + e.read + e.write + e.timeout
	local requests_n, duration, p50, p99
	if decide then
		table.sort(all_lat)
		local function pct(p)
			if #all_lat == 0 then return 0 end
			local i = math.ceil(#all_lat * p / 100)
			if i < 1 then i = 1 end
			return all_lat[i]
		end
		requests_n, p50, p99 = got, pct(50), pct(99)
		duration = (t0 ~= nil and t1 ~= nil) and (t1 - t0) or 0
		io.write(string.format("decide: %d answers in %.3f s (first request to last answer)\n",
			got, duration / 1e6))
	else
		requests_n, duration = summary.requests, summary.duration
		p50, p99 = latency:percentile(50), latency:percentile(99)
	end
	io.write(string.format(
		"bench-result requests=%d duration_us=%d p50_us=%.0f p99_us=%.0f bad=%d errors=%d\n",
		requests_n, duration, p50, p99, total_bad, errors))
end
