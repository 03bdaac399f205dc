import FlowEvents
import FlowJSON
import Foundation

/// Reads a JSON Lines file of event envelopes (the jsonl sink's output) a chunk at a time, so memory
/// holds the envelopes, not the file as well. Used by `replay` and `simulate --from`.
enum JSONLinesFile {
    /// Why a file could not be read.
    enum Failure: Error {
        /// The file could not be opened or read (the words say why, and after which line).
        case unreadable(String)
        /// Line `line` (1-based, blank lines counted) is not an envelope.
        case badLine(Int, JSONInputError)
    }

    /// Every envelope, one per non-blank line (a line of only spaces, tabs and CRs is blank); the last
    /// line needs no newline.
    static func envelopes(_ path: String, chunkSize: Int = 1 << 20) -> Result<[Envelope], Failure> {
        guard let file = FileHandle(forReadingAtPath: path) else {
            return .failure(.unreadable(ServeChecks.whyUnreadable(path)))
        }
        defer { try? file.close() }
        var out: [Envelope] = []
        var line = 0
        // The bytes read and not yet parsed: whole lines, then the start of one a chunk cut.
        var pending: [UInt8] = []
        // How many bytes at the start of the unfinished line are known to hold no newline, so that
        // a line longer than a chunk is searched once, not once per chunk.
        var searched = 0
        var ended = false
        while !ended {
            do {
                let chunk = try file.read(upToCount: max(1, chunkSize)) ?? Data()
                ended = chunk.isEmpty
                pending.append(contentsOf: chunk)
            } catch {
                let why = line == 0 ? ServeChecks.whyUnreadable(path) : "read failed after line \(line): \(error.localizedDescription)"
                return .failure(.unreadable(why))
            }
            var start = pending.startIndex
            while start < pending.endIndex {
                // At the end of the file, the last line needs no newline.
                guard let end = pending[(start + searched)...].firstIndex(of: 0x0A) ?? (ended ? pending.endIndex : nil) else {
                    searched = pending.endIndex - start
                    break
                }
                searched = 0
                line += 1
                let text = pending[start..<end]
                start = end + 1
                guard text.contains(where: { $0 != 0x20 && $0 != 0x0D && $0 != 0x09 }) else { continue }
                do throws(JSONInputError) {
                    out.append(try Envelope(jsonValue: try JSON5.parse(bytes: Array(text))))
                } catch {
                    return .failure(.badLine(line, error))
                }
            }
            pending.removeSubrange(..<min(start, pending.endIndex))
        }
        return .success(out)
    }
}
