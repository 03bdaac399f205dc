import FlowJSON
import Testing

/// The error `body` throws, or nil when it succeeds.
func decodeFailure<T>(_ body: () throws(JSONInputError) -> T) -> JSONInputError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}

@Suite("JSONCursor: decoding with paths")
struct JSONCursorTests {
    let document: JSONValue = [
        "name": "onboarding",
        "steps": [
            ["fetchPolicy": "cacheFirst", "timeout": 5],
            ["fetchPolicy": 3, "timeout": "5s"],
        ],
        "placements": ["main paywall": ["weight": 2.5], "home": ["weight": 1]],
        "enabled": true,
        "empty": "",
        "blank": "   ",
        "nothing": nil,
    ]

    @Test("paths follow members and elements, with bracket form for non-identifier keys")
    func paths() throws {
        let root = try JSONCursor(document).object()
        #expect(root.path == "$")
        let steps = try root.required("steps").array()
        #expect(steps.map(\.path) == ["$.steps[0]", "$.steps[1]"])
        #expect(try steps[1].object().required("fetchPolicy").path == "$.steps[1].fetchPolicy")
        let placements = try root.required("placements").object()
        #expect(try placements.required("main paywall").path == #"$.placements["main paywall"]"#)
        #expect(JSONPath.appending(key: "9lives", to: "$") == #"$["9lives"]"#)
        #expect(JSONPath.appending(key: "say \"hi\"", to: "$.a") == #"$.a["say \"hi\""]"#)
        #expect(JSONPath.appending(key: "", to: "$") == #"$[""]"#)
        #expect(JSONPath.appending(key: "snake_case2", to: "$") == "$.snake_case2")
        #expect(JSONPath.appending(index: 12, to: "$.a") == "$.a[12]")
    }

    @Test("typed accessors return values of the right kind")
    func accessors() throws {
        let root = try JSONCursor(document).object()
        #expect(try root.required("name").string() == "onboarding")
        #expect(try root.required("name").nonEmptyString() == "onboarding")
        #expect(try root.required("enabled").bool() == true)
        let first = try root.required("steps").array()[0].object()
        #expect(try first.required("timeout").int() == 5)
        #expect(try first.required("timeout").double() == 5)
        #expect(try root.required("placements").object().required("main paywall").object().required("weight").double() == 2.5)
        #expect(try JSONCursor(-7.0).int() == -7)
    }

    @Test("a value of the wrong kind says what was expected and what was found, at its path")
    func wrongKind() throws {
        let root = try JSONCursor(document).object()
        let second = try root.required("steps").array()[1].object()
        #expect(decodeFailure { () throws(JSONInputError) in try second.required("timeout").double() }
            == JSONInputError(path: "$.steps[1].timeout", message: #"expected a number, got a string "5s""#))
        #expect(decodeFailure { () throws(JSONInputError) in try second.required("fetchPolicy").string() }
            == JSONInputError(path: "$.steps[1].fetchPolicy", message: "expected a string, got a number 3"))
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("name").object() }
            == JSONInputError(path: "$.name", message: #"expected an object, got a string "onboarding""#))
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("name").array() }?.message
            == #"expected an array, got a string "onboarding""#)
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("steps").object() }?.message
            == "expected an object, got an array of 2 elements")
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("placements").bool() }?.message
            == #"expected true or false, got an object with keys home, main paywall"#)
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("nothing").string() }?.message
            == "expected a string, got null")
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("enabled").int() }?.message
            == "expected an integer, got true")
    }

    @Test("long found values are cut to 40 characters")
    func truncation() {
        let long = String(repeating: "x", count: 100)
        let message = decodeFailure { () throws(JSONInputError) in try JSONCursor(.string(long)).double() }?.message
        #expect(message == "expected a number, got a string \"" + String(repeating: "x", count: 40) + "\"… (100 characters)")
        let lines = decodeFailure { () throws(JSONInputError) in try JSONCursor("a\nb").int() }?.message
        #expect(lines == #"expected an integer, got a string "a\nb""#)
    }

    @Test("empty and blank strings are not non-empty strings")
    func nonEmpty() throws {
        let root = try JSONCursor(document).object()
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("empty").nonEmptyString() }
            == JSONInputError(path: "$.empty", message: "expected a non-empty string, got an empty string"))
        #expect(decodeFailure { () throws(JSONInputError) in try root.required("blank").nonEmptyString() }?.message
            == #"expected a non-empty string, got a blank string "   ""#)
        #expect(try root.required("blank").string() == "   ")
    }

    @Test("integers must be whole and exactly representable; doubles must be finite")
    func numbers() {
        #expect(decodeFailure { () throws(JSONInputError) in try JSONCursor(2.5, path: "$.n").int() }
            == JSONInputError(path: "$.n", message: "expected an integer, got a number 2.5"))
        #expect(decodeFailure { () throws(JSONInputError) in try JSONCursor(1e20).int() }?.message
            == "expected an integer between -9007199254740991 and 9007199254740991, got a number 1e+20")
        #expect(decodeFailure { () throws(JSONInputError) in try JSONCursor(.number(.nan)).double() }?.message
            == "expected a finite number, got a number nan")
        #expect(decodeFailure { () throws(JSONInputError) in try JSONCursor(.number(.infinity)).int() }?.message
            == "expected an integer, got a number inf")
        #expect(decodeFailure { () throws(JSONInputError) in try JSONCursor(9_007_199_254_740_991).int() } == nil)
    }

    @Test("required keys report the object's path; optional keys are nil only when absent")
    func requiredAndOptional() throws {
        let root = try JSONCursor(document).object()
        let step = try root.required("steps").array()[0].object()
        #expect(decodeFailure { () throws(JSONInputError) in try step.required("layout") }
            == JSONInputError(path: "$.steps[0]", message: #"missing required key "layout""#))
        #expect(step.optional("layout") == nil)
        let nothing = try #require(root.optional("nothing"))
        #expect(nothing.isNull)
        #expect(nothing.path == "$.nothing")
        #expect(root.optional("name")?.isNull == false)
    }

    @Test("unknown keys are rejected at the key's path, listing the allowed keys")
    func unknownKeys() throws {
        let step = try JSONCursor(document).object().required("steps").array()[0].object()
        #expect(decodeFailure { () throws(JSONInputError) in try step.rejectUnknownKeys(allowed: ["timeout", "layout", "fetch"]) }
            == JSONInputError(path: "$.steps[0].fetchPolicy",
                              message: #"unknown key "fetchPolicy" (expected one of: fetch, layout, timeout)"#))
        #expect(decodeFailure { () throws(JSONInputError) in try step.rejectUnknownKeys(allowed: ["timeout", "fetchPolicy"]) } == nil)
        let odd = JSONObjectCursor(path: "$.p", members: ["b": 1, "a b": 2, "z": 3])
        #expect(decodeFailure { () throws(JSONInputError) in try odd.rejectUnknownKeys(allowed: ["b"]) }
            == JSONInputError(path: #"$.p["a b"]"#, message: #"unknown key "a b" (expected one of: b)"#))
        #expect(decodeFailure { () throws(JSONInputError) in try odd.rejectUnknownKeys(allowed: []) }?.message
            == #"unknown key "a b" (no keys are allowed here)"#)
    }

    @Test("entries come sorted by key, each with its path")
    func entries() throws {
        let placements = try JSONCursor(document).object().required("placements").object()
        let entries = placements.entries
        #expect(entries.map(\.key) == ["home", "main paywall"])
        #expect(entries.map(\.cursor.path) == ["$.placements.home", #"$.placements["main paywall"]"#])
        #expect(entries.map(\.cursor.value) == [["weight": 1], ["weight": 2.5]])
    }

    @Test("custom errors carry the cursor's path")
    func customErrors() {
        let cursor = JSONCursor(5, path: "$.steps[3].loadTimeout")
        #expect(cursor.error("must be at least 1") == JSONInputError(path: "$.steps[3].loadTimeout", message: "must be at least 1"))
        #expect(cursor.expected(#"a duration like "5s""#).message == #"expected a duration like "5s", got a number 5"#)
    }

    @Test("a parsed JSON5 file decodes end to end and errors name file, path and problem")
    func endToEnd() throws {
        let text = """
            // scenario
            {
              name: 'smoke',
              steps: [
                { placement: 'main', timeout: 2, },
                { placement: 'home', timeout: 'soon' },
              ],
            }
            """
        let root = try JSONCursor(JSON5.parse(text)).object()
        try root.rejectUnknownKeys(allowed: ["name", "steps"])
        #expect(try root.required("name").nonEmptyString() == "smoke")
        var timeouts: [Int] = []
        var firstError: JSONInputError?
        for step in try root.required("steps").array() {
            let object = try step.object()
            do {
                timeouts.append(try object.required("timeout").int())
            } catch {
                firstError = firstError ?? error.inFile("scenarios/smoke.json5")
            }
        }
        #expect(timeouts == [2])
        #expect(firstError?.description == #"scenarios/smoke.json5: $.steps[1].timeout: expected an integer, got a string "soon""#)
    }
}
