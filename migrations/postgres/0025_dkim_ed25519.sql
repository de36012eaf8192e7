-- Optional Ed25519 DKIM dual-signing (RFC 8463) per sending domain: a second key with its own
-- selector, all three set or all three NULL. The private key (base64 of its PKCS#8 document)
-- never leaves the service; mail is signed with it, besides the RSA key, once its DNS record is
-- found.
ALTER TABLE domains ADD COLUMN dkim_ed25519_selector TEXT;
ALTER TABLE domains ADD COLUMN dkim_ed25519_private_key TEXT;
ALTER TABLE domains ADD COLUMN dkim_ed25519_public_key TEXT;
