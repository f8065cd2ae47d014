#!/usr/bin/perl
# http.pl — the quick start's web server and its client, in the perl that
# Debian's minbase already has (apt-get update alone takes minutes under TCG).
#   http.pl serve PORT DIR    serve DIR's files over HTTP/1.0 on 0.0.0.0:PORT
#   http.pl get PORT [PATH]   print what 127.0.0.1:PORT serves at PATH (exit 1 unless 200)
use strict;
use warnings;
use IO::Socket::INET;

my ($mode, $port, $arg) = @ARGV;
die "usage: http.pl serve PORT DIR | http.pl get PORT [PATH]\n" unless $mode && $port;
if ($mode eq 'get') {
	my $c = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port") or die "http.pl: connect: $!\n";
	print $c 'GET ' . ($arg // '/') . " HTTP/1.0\r\n\r\n";
	local $/;
	my ($head, $body) = split /\r\n\r\n/, (<$c> // ''), 2;
	exit 1 unless defined $head && $head =~ m{^HTTP/1\.[01] 200 };
	print $body // '';
	exit 0;
}
die "http.pl: unknown mode $mode\n" unless $mode eq 'serve' && defined $arg;
my $s = IO::Socket::INET->new(LocalAddr => "0.0.0.0:$port", Listen => 16, ReuseAddr => 1)
	or die "http.pl: listen on $port: $!\n";
while (my $c = $s->accept) {
	my ($path) = (<$c> // '') =~ m{^GET (/[^ ?]*)};
	$path = '/index.html' if defined $path && $path eq '/';
	my $data;
	if (defined $path && $path !~ m{/\.\.(/|$)} && open(my $f, '<', "$arg$path")) {
		local $/;
		$data = <$f>;
		close $f;
	}
	if (defined $data) {
		print $c "HTTP/1.0 200 OK\r\nContent-Length: " . length($data) . "\r\n\r\n$data";
	} else {
		print $c "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n";
	}
	close $c;
}
