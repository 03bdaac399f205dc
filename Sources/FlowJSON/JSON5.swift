/// Reads JSON and JSON5 documents into `JSONValue`s.
///
/// Accepts strict JSON and the JSON5 extensions: `//` and `/* */` comments, trailing commas,
/// unquoted identifier keys, single-quoted strings, hexadecimal numbers, a leading or trailing
/// decimal point, a leading `+`, and the extra string escapes (`\x41`, `\v`, `\0`, line
/// continuations). `Infinity` and `NaN` are recognised but rejected, because every number here
/// must be finite. Duplicate keys are an error.
///
/// Every error names the JSON path (as far as the reader got), the line and column (1-based,
/// counted in Unicode scalars) and what was expected:
///
/// ```swift
/// try JSON5.parse("{steps: [{fetchPolicy: 'x',}, {a: 1 b: 2}]}")
/// // $.steps[1].a (line 1, column 37): expected ',' or '}' after object member, found 'b'
/// ```
///
/// Hostile input never crashes the reader: nesting is limited to `maxDepth` levels and invalid
/// UTF-8 is reported where it occurs.
public enum JSON5 {
    /// The deepest nesting of arrays and objects a document may have.
    public static let maxDepth = 256

    /// Parses a JSON or JSON5 document.
    public static func parse(_ text: String) throws(JSONInputError) -> JSONValue {
        var text = text
        let result = text.withUTF8 { buffer in
            Result { () throws(JSONInputError) in try parse(buffer: buffer) }
        }
        return try result.get()
    }

    /// Parses a JSON or JSON5 document given as UTF-8 bytes (a leading byte order mark is allowed).
    public static func parse(bytes: some Collection<UInt8>) throws(JSONInputError) -> JSONValue {
        let contiguous = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONInputError) in try parse(buffer: buffer) }
        }
        if let contiguous { return try contiguous.get() }
        let copy = Array(bytes)
        let result = copy.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONInputError) in try parse(buffer: buffer) }
        }
        return try result.get()
    }

    private static func parse(buffer: UnsafeBufferPointer<UInt8>) throws(JSONInputError) -> JSONValue {
        var reader = Reader(bytes: buffer)
        do {
            return try reader.document()
        } catch {
            throw error.inputError(in: buffer)
        }
    }
}

// MARK: - Errors

/// One step of the path to the value being read.
private enum PathStep {
    case key(String)
    case index(Int)
}

/// A syntax error on its way out of the reader. The path is collected while unwinding (each
/// container adds its step), so reading valid input never pays for path bookkeeping.
private struct SyntaxFailure: Error {
    var offset: Int
    var message: String
    /// Innermost step first.
    var steps: [PathStep] = []

    func adding(_ step: PathStep) -> SyntaxFailure {
        var copy = self
        copy.steps.append(step)
        return copy
    }

    func inputError(in bytes: UnsafeBufferPointer<UInt8>) -> JSONInputError {
        var path = JSONPath.root
        for step in steps.reversed() {
            switch step {
            case .key(let key): path = JSONPath.appending(key: key, to: path)
            case .index(let index): path = JSONPath.appending(index: index, to: path)
            }
        }
        let end = min(offset, bytes.count)
        var line = 1
        var lineStart = 0
        var i = 0
        while i < end {
            let b = bytes[i]
            if b == Byte.lineFeed || (b == Byte.carriageReturn && (i + 1 >= bytes.count || bytes[i + 1] != Byte.lineFeed)) {
                line += 1
                lineStart = i + 1
            }
            i += 1
        }
        var column = 1
        for j in lineStart..<end where bytes[j] & 0xC0 != 0x80 { column += 1 }
        return JSONInputError(path: path, line: line, column: column, message: message)
    }
}

private enum Byte {
    static let lineFeed = UInt8(ascii: "\n")
    static let carriageReturn = UInt8(ascii: "\r")
    static let quote = UInt8(ascii: "\"")
    static let apostrophe = UInt8(ascii: "'")
    static let backslash = UInt8(ascii: "\\")
    static let slash = UInt8(ascii: "/")
    static let star = UInt8(ascii: "*")
    static let comma = UInt8(ascii: ",")
    static let colon = UInt8(ascii: ":")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")
    static let minus = UInt8(ascii: "-")
    static let plus = UInt8(ascii: "+")
    static let dot = UInt8(ascii: ".")
    static let zero = UInt8(ascii: "0")
    static let nine = UInt8(ascii: "9")
}

/// 10^0 ... 10^22, all exact in a Double.
private let exactPowersOfTen: [Double] = (0...22).map { exponent in
    var p = 1.0
    for _ in 0..<exponent { p *= 10 }
    return p
}

// MARK: - Reader

private struct Reader {
    let bytes: UnsafeBufferPointer<UInt8>
    var pos = 0
    /// Reused buffer for strings with escapes and for identifiers.
    var scratch: [UInt8] = []
    /// Reused buffers for the members of the objects being read, one per nesting level.
    var memberBuffers: [[Member]] = []

    struct Member {
        var key: String
        var value: JSONValue
        var offset: Int
    }

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    mutating func document() throws(SyntaxFailure) -> JSONValue {
        try skipSpace()
        guard pos < bytes.count else { throw SyntaxFailure(offset: pos, message: "empty document") }
        let value = try value(depth: 0)
        try skipSpace()
        guard pos >= bytes.count else { throw unexpected("end of input after the document") }
        return value
    }

    // MARK: Values

    mutating func value(depth: Int) throws(SyntaxFailure) -> JSONValue {
        guard pos < bytes.count else { throw unexpected("a value") }
        switch bytes[pos] {
        case Byte.openBrace: return try object(depth: depth + 1)
        case Byte.openBracket: return try array(depth: depth + 1)
        case Byte.quote, Byte.apostrophe: return .string(try string())
        case Byte.minus, Byte.plus, Byte.dot, Byte.zero...Byte.nine: return .number(try number())
        default:
            let start = pos
            switch asciiWord() {
            case "true": return .bool(true)
            case "false": return .bool(false)
            case "null": return .null
            case "Infinity", "NaN":
                throw SyntaxFailure(offset: start, message: "expected a finite number, found \(word(at: start))")
            default:
                pos = start
                throw unexpected("a value")
            }
        }
    }

    mutating func object(depth: Int) throws(SyntaxFailure) -> JSONValue {
        guard depth <= JSON5.maxDepth else {
            throw SyntaxFailure(offset: pos, message: "nesting deeper than \(JSON5.maxDepth) levels")
        }
        pos += 1
        try skipSpace()
        if pos < bytes.count && bytes[pos] == Byte.closeBrace {
            pos += 1
            return .object([:])
        }
        // Members are collected first so the dictionary is allocated once at its final size
        // (growing it member by member rehashes every key several times).
        var pairs: [Member] = []
        if depth >= memberBuffers.count { memberBuffers.append(contentsOf: repeatElement([], count: depth + 1 - memberBuffers.count)) }
        swap(&pairs, &memberBuffers[depth])
        while true {
            let keyStart = pos
            let key = try key()
            try skipSpace()
            guard pos < bytes.count && bytes[pos] == Byte.colon else {
                throw unexpected("':' after object key").adding(.key(key))
            }
            pos += 1
            try skipSpace()
            let member: JSONValue
            do {
                member = try value(depth: depth)
            } catch {
                throw error.adding(.key(key))
            }
            pairs.append(Member(key: key, value: member, offset: keyStart))
            try skipSpace()
            if pos < bytes.count && bytes[pos] == Byte.comma {
                pos += 1
                try skipSpace()
                if pos < bytes.count && bytes[pos] == Byte.closeBrace { break }
            } else if pos < bytes.count && bytes[pos] == Byte.closeBrace {
                break
            } else {
                throw unexpected("',' or '}' after object member").adding(.key(key))
            }
        }
        pos += 1
        var members = [String: JSONValue](minimumCapacity: pairs.count)
        for pair in pairs where members.updateValue(pair.value, forKey: pair.key) != nil {
            throw SyntaxFailure(offset: pair.offset, message: "duplicate key \(quoted(pair.key))", steps: [.key(pair.key)])
        }
        pairs.removeAll(keepingCapacity: true)
        swap(&pairs, &memberBuffers[depth])
        return .object(members)
    }

    mutating func array(depth: Int) throws(SyntaxFailure) -> JSONValue {
        guard depth <= JSON5.maxDepth else {
            throw SyntaxFailure(offset: pos, message: "nesting deeper than \(JSON5.maxDepth) levels")
        }
        pos += 1
        var elements: [JSONValue] = []
        try skipSpace()
        if pos < bytes.count && bytes[pos] == Byte.closeBracket {
            pos += 1
            return .array(elements)
        }
        while true {
            do {
                elements.append(try value(depth: depth))
            } catch {
                throw error.adding(.index(elements.count))
            }
            try skipSpace()
            if pos < bytes.count && bytes[pos] == Byte.comma {
                pos += 1
                try skipSpace()
                if pos < bytes.count && bytes[pos] == Byte.closeBracket {
                    pos += 1
                    return .array(elements)
                }
            } else if pos < bytes.count && bytes[pos] == Byte.closeBracket {
                pos += 1
                return .array(elements)
            } else {
                throw unexpected("',' or ']' after array element").adding(.index(elements.count - 1))
            }
        }
    }

    mutating func key() throws(SyntaxFailure) -> String {
        guard pos < bytes.count else { throw unexpected("an object key or '}'") }
        let b = bytes[pos]
        if b == Byte.quote || b == Byte.apostrophe { return try string() }
        if let identifier = try identifier() { return identifier }
        throw unexpected("an object key or '}'")
    }

    // MARK: Strings

    mutating func string() throws(SyntaxFailure) -> String {
        let start = pos
        let quote = bytes[pos]
        pos += 1
        let contentStart = pos
        while pos < bytes.count {
            // Tight loop over the common case: printable ASCII other than the quote and backslash.
            while pos < bytes.count, case let b = bytes[pos], b >= 0x20, b < 0x80, b != quote, b != Byte.backslash {
                pos += 1
            }
            guard pos < bytes.count else { break }
            let b = bytes[pos]
            if b == quote {
                let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[contentStart..<pos]), as: UTF8.self)
                pos += 1
                return text
            }
            if b == Byte.backslash {
                scratch.removeAll(keepingCapacity: true)
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[contentStart..<pos]))
                return try escapedString(quote: quote, start: start)
            }
            if b == Byte.lineFeed || b == Byte.carriageReturn {
                throw SyntaxFailure(offset: start, message: "unterminated string")
            }
            pos += b < 0x80 ? 1 : try validScalarLength()
        }
        throw SyntaxFailure(offset: start, message: "unterminated string")
    }

    /// The rest of a string that contains escapes; `scratch` holds the content read so far.
    mutating func escapedString(quote: UInt8, start: Int) throws(SyntaxFailure) -> String {
        while pos < bytes.count {
            let b = bytes[pos]
            if b == quote {
                pos += 1
                return String(decoding: scratch, as: UTF8.self)
            }
            if b == Byte.lineFeed || b == Byte.carriageReturn {
                throw SyntaxFailure(offset: start, message: "unterminated string")
            }
            if b == Byte.backslash {
                try escape(stringStart: start)
                continue
            }
            let length = b < 0x80 ? 1 : try validScalarLength()
            scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[pos..<(pos + length)]))
            pos += length
        }
        throw SyntaxFailure(offset: start, message: "unterminated string")
    }

    /// Reads one escape sequence (at the backslash) and appends what it stands for to `scratch`.
    mutating func escape(stringStart: Int) throws(SyntaxFailure) {
        let escapeStart = pos
        pos += 1
        guard pos < bytes.count else { throw SyntaxFailure(offset: stringStart, message: "unterminated string") }
        let b = bytes[pos]
        pos += 1
        switch b {
        case UInt8(ascii: "b"): scratch.append(0x08)
        case UInt8(ascii: "f"): scratch.append(0x0C)
        case UInt8(ascii: "n"): scratch.append(0x0A)
        case UInt8(ascii: "r"): scratch.append(0x0D)
        case UInt8(ascii: "t"): scratch.append(0x09)
        case UInt8(ascii: "v"): scratch.append(0x0B)
        case Byte.zero:
            if pos < bytes.count && (Byte.zero...Byte.nine).contains(bytes[pos]) {
                throw SyntaxFailure(offset: escapeStart, message: "invalid escape: octal escapes are not allowed")
            }
            scratch.append(0)
        case UInt8(ascii: "1")...Byte.nine:
            throw SyntaxFailure(offset: escapeStart, message: "invalid escape '\\\(Character(Unicode.Scalar(b)))'")
        case UInt8(ascii: "x"):
            guard let value = hexValue(at: pos, digits: 2) else {
                throw SyntaxFailure(offset: escapeStart, message: "invalid escape: expected two hex digits after '\\x'")
            }
            pos += 2
            appendUTF8(Unicode.Scalar(UInt8(value)))
        case UInt8(ascii: "u"):
            appendUTF8(try unicodeEscape(escapeStart: escapeStart))
        case Byte.lineFeed:
            break // line continuation
        case Byte.carriageReturn:
            if pos < bytes.count && bytes[pos] == Byte.lineFeed { pos += 1 }
        default:
            // Any other character stands for itself (JSON5), including U+2028 and U+2029 as line continuations.
            pos -= 1
            let length = b < 0x80 ? 1 : try validScalarLength()
            let isLineSeparator = length == 3 && bytes[pos] == 0xE2 && bytes[pos + 1] == 0x80
                && (bytes[pos + 2] == 0xA8 || bytes[pos + 2] == 0xA9)
            if !isLineSeparator {
                scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[pos..<(pos + length)]))
            }
            pos += length
        }
    }

    /// Reads the `XXXX` after `\u` (and a second `\uXXXX` for a surrogate pair).
    mutating func unicodeEscape(escapeStart: Int) throws(SyntaxFailure) -> Unicode.Scalar {
        guard let high = hexValue(at: pos, digits: 4) else {
            throw SyntaxFailure(offset: escapeStart, message: "invalid escape: expected four hex digits after '\\u'")
        }
        pos += 4
        if let scalar = Unicode.Scalar(high) { return scalar }
        guard (0xD800...0xDBFF).contains(high) else {
            throw SyntaxFailure(offset: escapeStart, message: "invalid escape: unpaired surrogate \\u\(hex4(high))")
        }
        guard pos + 1 < bytes.count, bytes[pos] == Byte.backslash, bytes[pos + 1] == UInt8(ascii: "u"),
              let low = hexValue(at: pos + 2, digits: 4), (0xDC00...0xDFFF).contains(low)
        else {
            throw SyntaxFailure(offset: escapeStart, message: "invalid escape: unpaired surrogate \\u\(hex4(high))")
        }
        pos += 6
        let combined = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
        guard let scalar = Unicode.Scalar(combined) else {
            throw SyntaxFailure(offset: escapeStart, message: "invalid escape: unpaired surrogate \\u\(hex4(high))")
        }
        return scalar
    }

    // MARK: Identifiers

    /// Reads an unquoted key (an ECMAScript IdentifierName); nil when none starts here.
    mutating func identifier() throws(SyntaxFailure) -> String? {
        scratch.removeAll(keepingCapacity: true)
        while pos < bytes.count {
            let b = bytes[pos]
            let scalar: Unicode.Scalar
            let length: Int
            if b == Byte.backslash {
                guard pos + 1 < bytes.count, bytes[pos + 1] == UInt8(ascii: "u"),
                      let value = hexValue(at: pos + 2, digits: 4), let escaped = Unicode.Scalar(value),
                      scratch.isEmpty ? isIdentifierStart(escaped) : isIdentifierPart(escaped)
                else {
                    throw SyntaxFailure(offset: pos, message: "invalid escape in unquoted key")
                }
                scalar = escaped
                length = 6
            } else if b < 0x80 {
                scalar = Unicode.Scalar(b)
                length = 1
            } else {
                length = try validScalarLength()
                guard let decoded = decodeScalar(at: pos) else { throw invalidUTF8() }
                scalar = decoded.scalar
            }
            guard scratch.isEmpty ? isIdentifierStart(scalar) : isIdentifierPart(scalar) else { break }
            appendUTF8(scalar)
            pos += length
        }
        return scratch.isEmpty ? nil : String(decoding: scratch, as: UTF8.self)
    }

    func isIdentifierStart(_ s: Unicode.Scalar) -> Bool {
        switch s {
        case "a"..."z", "A"..."Z", "$", "_": return true
        case _ where s.value < 0x80: return false
        default:
            switch s.properties.generalCategory {
            case .uppercaseLetter, .lowercaseLetter, .titlecaseLetter, .modifierLetter, .otherLetter, .letterNumber:
                return true
            default: return false
            }
        }
    }

    func isIdentifierPart(_ s: Unicode.Scalar) -> Bool {
        if isIdentifierStart(s) { return true }
        switch s {
        case "0"..."9", "\u{200C}", "\u{200D}": return true
        case _ where s.value < 0x80: return false
        default:
            switch s.properties.generalCategory {
            case .nonspacingMark, .spacingMark, .decimalNumber, .connectorPunctuation: return true
            default: return false
            }
        }
    }

    // MARK: Numbers

    mutating func number() throws(SyntaxFailure) -> Double {
        let start = pos
        var negative = false
        if bytes[pos] == Byte.minus || bytes[pos] == Byte.plus {
            negative = bytes[pos] == Byte.minus
            pos += 1
        }
        guard pos < bytes.count else { throw unexpected("a digit") }
        let first = bytes[pos]
        if first == UInt8(ascii: "I") || first == UInt8(ascii: "N") {
            let wordStart = pos
            let word = asciiWord()
            if word == "Infinity" || word == "NaN" {
                throw SyntaxFailure(offset: start, message: "expected a finite number, found \(self.word(at: start))")
            }
            pos = wordStart
            throw unexpected("a digit")
        }
        if first == Byte.zero, pos + 1 < bytes.count, bytes[pos + 1] | 0x20 == UInt8(ascii: "x") {
            pos += 2
            var value = 0.0
            var digits = 0
            while pos < bytes.count, let d = hexDigit(bytes[pos]) {
                value = value * 16 + Double(d)
                digits += 1
                pos += 1
            }
            guard digits > 0 else { throw unexpected("a hex digit after '0x'") }
            guard value.isFinite else { throw SyntaxFailure(offset: start, message: "number out of range") }
            return negative ? -value : value
        }

        var mantissa: UInt64 = 0
        var exponent = 0
        var exact = true
        var integerDigits = 0
        var fractionDigits = 0
        while pos < bytes.count, bytes[pos] &- Byte.zero < 10 {
            if mantissa < 1_000_000_000_000_000_000 {
                mantissa = mantissa * 10 + UInt64(bytes[pos] - Byte.zero)
            } else {
                exact = false
                exponent += 1
            }
            integerDigits += 1
            pos += 1
        }
        if integerDigits > 1 && bytes[pos - integerDigits] == Byte.zero {
            throw SyntaxFailure(offset: start, message: "invalid number: leading zeros are not allowed")
        }
        if pos < bytes.count && bytes[pos] == Byte.dot {
            pos += 1
            while pos < bytes.count, bytes[pos] &- Byte.zero < 10 {
                if mantissa < 1_000_000_000_000_000_000 {
                    mantissa = mantissa * 10 + UInt64(bytes[pos] - Byte.zero)
                    exponent -= 1
                } else {
                    exact = false
                }
                fractionDigits += 1
                pos += 1
            }
        }
        guard integerDigits + fractionDigits > 0 else { throw unexpected("a digit") }
        if pos < bytes.count && bytes[pos] | 0x20 == UInt8(ascii: "e") {
            pos += 1
            var exponentNegative = false
            if pos < bytes.count && (bytes[pos] == Byte.minus || bytes[pos] == Byte.plus) {
                exponentNegative = bytes[pos] == Byte.minus
                pos += 1
            }
            var explicit = 0
            var exponentDigits = 0
            while pos < bytes.count, bytes[pos] &- Byte.zero < 10 {
                explicit = min(explicit * 10 + Int(bytes[pos] - Byte.zero), 1_000_000)
                exponentDigits += 1
                pos += 1
            }
            guard exponentDigits > 0 else { throw unexpected("a digit in the exponent") }
            exponent += exponentNegative ? -explicit : explicit
        }

        let value: Double
        if exact && mantissa <= 1 << 53 && (-22...22).contains(exponent) {
            // Both operands are exact, so one IEEE operation gives the correctly rounded result.
            value = exponent < 0
                ? Double(mantissa) / exactPowersOfTen[-exponent]
                : Double(mantissa) * exactPowersOfTen[exponent]
        } else {
            let digitsStart = start + (bytes[start] == Byte.minus || bytes[start] == Byte.plus ? 1 : 0)
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[digitsStart..<pos]), as: UTF8.self)
            guard let parsed = Double(text) else {
                throw SyntaxFailure(offset: start, message: "invalid number")
            }
            value = parsed
        }
        guard value.isFinite else { throw SyntaxFailure(offset: start, message: "number out of range") }
        return negative ? -value : value
    }

    // MARK: Whitespace and comments

    @inline(__always)
    mutating func skipSpace() throws(SyntaxFailure) {
        // Fast exit when the next byte is plainly not space or a comment (most calls in compact JSON).
        if pos < bytes.count, bytes[pos] > 0x20, bytes[pos] < 0x80, bytes[pos] != Byte.slash { return }
        try skipSpaceAndComments()
    }

    mutating func skipSpaceAndComments() throws(SyntaxFailure) {
        while pos < bytes.count {
            switch bytes[pos] {
            case 0x20, 0x0A, 0x0D, 0x09, 0x0B, 0x0C:
                pos += 1
            case Byte.slash:
                guard pos + 1 < bytes.count else { return }
                if bytes[pos + 1] == Byte.slash {
                    pos += 2
                    while pos < bytes.count && bytes[pos] != Byte.lineFeed && bytes[pos] != Byte.carriageReturn {
                        pos += bytes[pos] < 0x80 ? 1 : try validScalarLength()
                    }
                } else if bytes[pos + 1] == Byte.star {
                    let start = pos
                    pos += 2
                    while true {
                        guard pos + 1 < bytes.count else {
                            throw SyntaxFailure(offset: start, message: "unterminated comment")
                        }
                        if bytes[pos] == Byte.star && bytes[pos + 1] == Byte.slash {
                            pos += 2
                            break
                        }
                        pos += bytes[pos] < 0x80 ? 1 : try validScalarLength()
                    }
                } else {
                    return
                }
            case 0x80...:
                guard let decoded = decodeScalar(at: pos), isSpace(decoded.scalar) else { return }
                pos += decoded.length
            default:
                return
            }
        }
    }

    /// JSON5 white space beyond ASCII: no-break space, line and paragraph separators, the byte
    /// order mark and every other space separator.
    func isSpace(_ s: Unicode.Scalar) -> Bool {
        s == "\u{FEFF}" || s == "\u{2028}" || s == "\u{2029}" || s.properties.generalCategory == .spaceSeparator
    }

    // MARK: Bytes

    /// The length of the valid UTF-8 sequence at `pos`, or an "invalid UTF-8" failure.
    func validScalarLength() throws(SyntaxFailure) -> Int {
        guard let decoded = decodeScalar(at: pos) else { throw invalidUTF8() }
        return decoded.length
    }

    /// Decodes one UTF-8 sequence, rejecting overlong forms, surrogates and values past U+10FFFF.
    func decodeScalar(at i: Int) -> (scalar: Unicode.Scalar, length: Int)? {
        let lead = bytes[i]
        if lead < 0x80 { return (Unicode.Scalar(lead), 1) }
        let length: Int
        let minimum: UInt32
        var value: UInt32
        switch lead {
        case 0xC2...0xDF: length = 2; minimum = 0x80; value = UInt32(lead & 0x1F)
        case 0xE0...0xEF: length = 3; minimum = 0x800; value = UInt32(lead & 0x0F)
        case 0xF0...0xF4: length = 4; minimum = 0x10000; value = UInt32(lead & 0x07)
        default: return nil
        }
        guard i + length <= bytes.count else { return nil }
        for k in 1..<length {
            let next = bytes[i + k]
            guard next & 0xC0 == 0x80 else { return nil }
            value = value << 6 | UInt32(next & 0x3F)
        }
        guard value >= minimum, let scalar = Unicode.Scalar(value) else { return nil }
        return (scalar, length)
    }

    func invalidUTF8() -> SyntaxFailure {
        SyntaxFailure(offset: pos, message: "invalid UTF-8 (byte 0x\(String(bytes[pos], radix: 16, uppercase: true)))")
    }

    func hexDigit(_ b: UInt8) -> UInt32? {
        switch b {
        case Byte.zero...Byte.nine: UInt32(b - Byte.zero)
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt32(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt32(b - UInt8(ascii: "A") + 10)
        default: nil
        }
    }

    func hexValue(at i: Int, digits: Int) -> UInt32? {
        guard i + digits <= bytes.count else { return nil }
        var value: UInt32 = 0
        for k in 0..<digits {
            guard let d = hexDigit(bytes[i + k]) else { return nil }
            value = value << 4 | d
        }
        return value
    }

    func hex4(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    mutating func appendUTF8(_ scalar: Unicode.Scalar) {
        let v = scalar.value
        switch v {
        case ..<0x80:
            scratch.append(UInt8(v))
        case ..<0x800:
            scratch.append(UInt8(0xC0 | v >> 6))
            scratch.append(UInt8(0x80 | v & 0x3F))
        case ..<0x10000:
            scratch.append(UInt8(0xE0 | v >> 12))
            scratch.append(UInt8(0x80 | v >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | v & 0x3F))
        default:
            scratch.append(UInt8(0xF0 | v >> 18))
            scratch.append(UInt8(0x80 | v >> 12 & 0x3F))
            scratch.append(UInt8(0x80 | v >> 6 & 0x3F))
            scratch.append(UInt8(0x80 | v & 0x3F))
        }
    }

    /// Consumes a run of ASCII letters, digits and underscores and returns it.
    mutating func asciiWord() -> Substring {
        let start = pos
        while pos < bytes.count, isWordByte(bytes[pos]) { pos += 1 }
        return Substring(String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<pos]), as: UTF8.self))
    }

    func isWordByte(_ b: UInt8) -> Bool {
        (b | 0x20) &- UInt8(ascii: "a") < 26 || b &- Byte.zero < 10 || b == UInt8(ascii: "_")
    }

    /// The word (or sign and word) at `start`, quoted, at most 20 characters.
    func word(at start: Int) -> String {
        var end = start
        if end < bytes.count && (bytes[end] == Byte.minus || bytes[end] == Byte.plus) { end += 1 }
        while end < bytes.count, end - start < 20, isWordByte(bytes[end]) { end += 1 }
        return "'" + String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<end]), as: UTF8.self) + "'"
    }

    /// What is at the current position, for "expected X, found Y" messages.
    func found() -> String {
        let b = bytes[pos]
        if isWordByte(b) { return word(at: pos) }
        if b > 0x20 && b < 0x7F { return "'\(Character(Unicode.Scalar(b)))'" }
        if let decoded = decodeScalar(at: pos) {
            if decoded.scalar.properties.generalCategory == .control || isSpace(decoded.scalar) {
                return "U+" + hex4(decoded.scalar.value)
            }
            return "'\(Character(decoded.scalar))' (U+\(hex4(decoded.scalar.value)))"
        }
        return "byte 0x\(String(b, radix: 16, uppercase: true))"
    }

    /// A failure at the current position saying what was expected and what was found.
    func unexpected(_ expectation: String) -> SyntaxFailure {
        guard pos < bytes.count else {
            return SyntaxFailure(offset: pos, message: "unexpected end of input (expected \(expectation))")
        }
        if bytes[pos] >= 0x80 && decodeScalar(at: pos) == nil { return invalidUTF8() }
        return SyntaxFailure(offset: pos, message: "expected \(expectation), found \(found())")
    }

    func quoted(_ s: String) -> String {
        var out = ""
        JSONWriter.writeString(s, to: &out)
        return out
    }
}
