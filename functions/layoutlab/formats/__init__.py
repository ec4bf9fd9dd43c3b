"""What a file is and how cloud-ready it is (sniffing, inspection)."""
