fn main() {
    let version = semver::Version::parse("1.2.3").expect("a version");
    let mut buffer = itoa::Buffer::new();
    println!("{version} {}", buffer.format(version.major + 41));
}
