import FlowJSON
import Foundation
import Testing

@Suite("file paths")
struct FilePathsTests {
    @Test("the directory of a path is what NSString's deletingLastPathComponent says, one-character names included")
    func directoryOfAPath() {
        let cases: [(String, String)] = [
            ("x", ""), ("x/", ""), (".", ""), ("ab", ""), ("..", ""), ("", ""), ("é", ""),
            ("/", "/"), ("/x", "/"), ("//x", "/"), ("/tmp/x/", "/tmp"), ("/a/b", "/a"),
            ("x/y", "x"), ("a//b", "a"), ("./x", "."), ("a/.", "a"), ("s/events.jsonl", "s"),
        ]
        for (path, directory) in cases {
            #expect(FilePaths.directory(of: path) == directory, "\(path)")
        }
        // Where Foundation does not trap, the answers agree.
        for path in ["ab", "/", "/x", "/tmp/x/", "/a/b", "x/y", "a//b", "./x", "a/.", ".."] {
            #expect(FilePaths.directory(of: path) == (path as NSString).deletingLastPathComponent, "\(path)")
        }
    }
}
