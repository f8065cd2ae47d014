// The node template's service: express on 127.0.0.1:3000.
const express = require("express");
const app = express();
app.get("/", (req, res) => res.type("text/plain").send("hello from node\n"));
app.listen(3000, "127.0.0.1");
