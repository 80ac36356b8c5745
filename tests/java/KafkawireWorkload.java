// Real Java-client traffic for kafkawire's captures and tests.
//
//   java -cp CLASSES:LIBS/* KafkawireWorkload MODE BOOTSTRAP ARGS... [-- MODE BOOTSTRAP ARGS...]
//     codecs BOOTSTRAP PREFIX N           idempotent producer per codec (none gzip snappy lz4 zstd)
//                                         into PREFIX-<codec>, N records each
//     group BOOTSTRAP TOPICS GROUP N PROTO consumer group (PROTO: consumer = KIP-848, classic)
//                                         reading N records from the comma-separated TOPICS
//     txn BOOTSTRAP TOPIC N               transactional producer: commit N (+ offsets), abort N/2,
//                                         commit N; then read_committed and read_uncommitted readers
//     admin BOOTSTRAP PREFIX              topics, configs, partitions, groups, cluster, offsets
//     secrets BOOTSTRAP TOPIC USER PASSWORD  on a SASL_PLAINTEXT listener: SCRAM-SHA-256 admin (delegation
//                                         token create/describe/renew, a login with it, expire; SCRAM
//                                         credentials for carol), OAUTHBEARER producer (unsecured JWS),
//                                         PLAIN consumer
//     rebalance BOOTSTRAP TOPIC GROUP     KIP-848 members kip-a, kip-b joining and leaving (prints "owned ...")
//     share BOOTSTRAP TOPIC GROUP N       a share group (KIP-932): GROUP's share.auto.offset.reset set to
//                                         earliest, then share consumers sh-a and sh-b read N records of
//                                         TOPIC between them, each acknowledged (prints "shared NAME COUNT")
//     streams BOOTSTRAP SOURCE SINK N     a Kafka Streams app `kr-streams` in a streams group (KIP-1071,
//                                         group.protocol=streams) upper-casing SOURCE into SINK until a
//                                         reader has N records of SINK (prints "tasks ..." and "streamed N")
//
// Every step prints one line "STEP key=value ..." to stdout, which the Python
// side asserts. Any failure exits 1 with the exception on stderr. Every wait
// is bounded.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;

public class KafkawireWorkload {
    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};
    static final long WAIT_S = 30;

    public static void main(String[] argv) throws Exception {
        // several steps in one JVM: MODE ARGS... -- MODE ARGS...
        List<String> cur = new ArrayList<>();
        for (String a : argv) {
            if (a.equals("--")) {
                run(cur.toArray(new String[0]));
                cur.clear();
            } else {
                cur.add(a);
            }
        }
        run(cur.toArray(new String[0]));
    }

    static void run(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: KafkawireWorkload codecs|group|txn|admin BOOTSTRAP ARGS...");
            System.exit(2);
        }
        String bootstrap = args[1];
        switch (args[0]) {
            case "codecs" -> codecs(bootstrap, args[2], Integer.parseInt(args[3]));
            case "group" -> group(bootstrap, Arrays.asList(args[2].split(",")), args[3],
                                  Integer.parseInt(args[4]), args[5]);
            case "txn" -> txn(bootstrap, args[2], Integer.parseInt(args[3]));
            case "admin" -> admin(bootstrap, args[2]);
            case "secrets" -> secrets(bootstrap, args[2], args[3], args[4]);
            case "rebalance" -> rebalance(bootstrap, args[2], args[3]);
            case "share" -> share(bootstrap, args[2], args[3], Integer.parseInt(args[4]));
            case "streams" -> streams(bootstrap, args[2], args[3], Integer.parseInt(args[4]));
            case "tls" -> tls(bootstrap, args[2], Integer.parseInt(args[3]), args[4], args[5],
                              Arrays.copyOfRange(args, 6, args.length));
            default -> {
                System.err.println("unknown mode " + args[0]);
                System.exit(2);
            }
        }
    }

    /** A deterministic, mildly compressible value, like make_captures.payload. */
    static String payload(int i, int size) {
        StringBuilder b = new StringBuilder(String.format("message %06d ", i));
        while (b.length() < size) b.append("kafkawire-sample-");
        return b.substring(0, size);
    }

    static Properties base(String bootstrap, String clientId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("client.id", clientId);
        return p;
    }

    static void createTopics(String bootstrap, String clientId, Collection<String> topics) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap, clientId))) {
            List<NewTopic> nt = new ArrayList<>();
            for (String t : topics) nt.add(new NewTopic(t, 1, (short) 1));
            admin.createTopics(nt).all().get(WAIT_S, TimeUnit.SECONDS);
            System.out.println("created topics=" + String.join(",", topics));
        }
    }

    static KafkaProducer<String, String> producer(Properties p) {
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("max.block.ms", "30000");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "10000");
        return new KafkaProducer<>(p);
    }

    static void codecs(String bootstrap, String prefix, int n) throws Exception {
        List<String> topics = new ArrayList<>();
        for (String c : CODECS) topics.add(prefix + "-" + c);
        createTopics(bootstrap, "java-admin", topics);
        for (String codec : CODECS) {
            Properties p = base(bootstrap, "java-producer-" + codec);
            p.put("enable.idempotence", "true");
            p.put("acks", "all");
            p.put("compression.type", codec);
            p.put("linger.ms", "5");
            try (KafkaProducer<String, String> prod = producer(p)) {
                for (int i = 0; i < n; i++) {
                    ProducerRecord<String, String> r = new ProducerRecord<>(prefix + "-" + codec, 0,
                            "key-" + (i % 5), payload(i, 200));
                    r.headers().add("codec", codec.getBytes(StandardCharsets.UTF_8));
                    prod.send(r);
                }
                prod.flush();
            }
            System.out.println("produced topic=" + prefix + "-" + codec + " codec=" + codec + " count=" + n);
        }
    }

    static KafkaConsumer<String, String> consumer(Properties p) {
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("enable.auto.commit", "false");
        p.put("request.timeout.ms", "10000");
        return new KafkaConsumer<>(p);
    }

    static void group(String bootstrap, List<String> topics, String group, int n, String protocol) {
        Properties p = base(bootstrap, "java-consumer");
        p.put("group.id", group);
        p.put("group.protocol", protocol);
        if (protocol.equals("classic")) {
            // Tansu holds the JoinGroup after MEMBER_ID_REQUIRED for about 5 s;
            // a short session timeout would expire meanwhile. (The consumer
            // protocol sets these on the broker and rejects them here.)
            p.put("session.timeout.ms", "10000");
            p.put("heartbeat.interval.ms", "1000");
        }
        int seen = 0;
        try (KafkaConsumer<String, String> c = consumer(p)) {
            c.subscribe(topics);
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (seen < n && System.nanoTime() < deadline) {
                seen += c.poll(Duration.ofMillis(500)).count();
            }
            c.commitSync(Duration.ofSeconds(WAIT_S));
        }
        System.out.println("consumed group=" + group + " protocol=" + protocol + " count=" + seen);
        if (seen != n) throw new IllegalStateException("consumed " + seen + " of " + n);
    }

    /** Two KIP-848 members (group.protocol=consumer) of one group on a 4-partition topic: the
     *  first joins alone, the second joins, the first leaves. After each step, once every member
     *  owns as many partitions as the step should give it, each prints its own assignment() as
     *  "owned STEP CLIENT MEMBER P,P,...": the witness the tests hold the rebalance tables to. */
    static void rebalance(String bootstrap, String topic, String group) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap, "kip-admin"))) {
            admin.createTopics(List.of(new NewTopic(topic, 4, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
        }
        KafkaConsumer<String, String> a = member(bootstrap, group, "kip-a", topic);
        settle("kip-a_joined", List.of("kip-a"), List.of(a), List.of(4));
        KafkaConsumer<String, String> b = member(bootstrap, group, "kip-b", topic);
        settle("kip-b_joined", List.of("kip-a", "kip-b"), List.of(a, b), List.of(2, 2));
        a.close(Duration.ofSeconds(WAIT_S));
        settle("kip-a_left", List.of("kip-b"), List.of(b), List.of(4));
        b.close(Duration.ofSeconds(WAIT_S));
    }

    static void share(String bootstrap, String topic, String group, int n) throws Exception {
        // a share group starts at the latest offset unless its config says otherwise
        try (Admin admin = Admin.create(base(bootstrap, "sh-admin"))) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                    AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(res, List.of(op))).all().get(WAIT_S, TimeUnit.SECONDS);
        }
        List<String> names = List.of("sh-a", "sh-b");
        List<KafkaShareConsumer<String, String>> members = new ArrayList<>();
        for (String name : names) {
            Properties p = base(bootstrap, name);
            p.put("group.id", group);
            p.put("share.acknowledgement.mode", "explicit");
            KafkaShareConsumer<String, String> c =
                    new KafkaShareConsumer<>(p, new StringDeserializer(), new StringDeserializer());
            c.subscribe(List.of(topic));
            members.add(c);
        }
        int[] got = new int[names.size()];
        int total = 0;
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (total < n && System.nanoTime() < deadline) {
            for (int i = 0; i < members.size(); i++) {
                KafkaShareConsumer<String, String> c = members.get(i);
                ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : recs) {
                    c.acknowledge(r, AcknowledgeType.ACCEPT);
                    got[i]++;
                    total++;
                }
                if (!recs.isEmpty()) {
                    c.commitSync(Duration.ofSeconds(WAIT_S));
                }
            }
        }
        for (int i = 0; i < members.size(); i++) {
            System.out.println("shared " + names.get(i) + " " + got[i]);
            members.get(i).close(Duration.ofSeconds(WAIT_S));
        }
        if (total < n) {
            throw new IllegalStateException("share group read " + total + " of " + n);
        }
    }

    static void streams(String bootstrap, String source, String sink, int n) throws Exception {
        try (Admin admin = Admin.create(base(bootstrap, "st-admin"))) {
            admin.createTopics(List.of(new NewTopic(sink, 1, (short) 3))).all().get(WAIT_S, TimeUnit.SECONDS);
        }
        Properties p = base(bootstrap, "st-app");
        p.put("application.id", "kr-streams");
        p.put("group.protocol", "streams");
        p.put("default.key.serde", Serdes.StringSerde.class.getName());
        p.put("default.value.serde", Serdes.StringSerde.class.getName());
        p.put("auto.offset.reset", "earliest");
        p.put("num.stream.threads", "1");
        p.put("commit.interval.ms", "500");
        p.put("state.dir", java.nio.file.Files.createTempDirectory("kafkawire-streams").toString());
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>stream(source).mapValues(v -> v.toUpperCase()).to(sink);
        int seen = 0;
        try (KafkaStreams ks = new KafkaStreams(b.build(), p)) {
            ks.start();
            Properties c = base(bootstrap, "st-reader");
            c.put("group.id", "kr-streams-reader");
            try (KafkaConsumer<String, String> reader = consumer(c)) {
                reader.subscribe(List.of(sink));
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
                while (seen < n && System.nanoTime() < deadline) {
                    seen += reader.poll(Duration.ofMillis(200)).count();
                }
            }
            // the tasks the streams group gave this app, as the app itself knows them
            List<String> tasks = new ArrayList<>();
            ks.metadataForLocalThreads().forEach(t -> t.activeTasks().forEach(m -> tasks.add(m.taskId().toString())));
            tasks.sort(null);
            System.out.println("tasks " + String.join(",", tasks));
            ks.close(Duration.ofSeconds(WAIT_S));
        }
        System.out.println("streamed " + seen);
        if (seen < n) {
            throw new IllegalStateException("streams app wrote " + seen + " of " + n);
        }
    }

    static KafkaConsumer<String, String> member(String bootstrap, String group, String id, String topic) {
        Properties p = base(bootstrap, id);
        p.put("group.id", group);
        p.put("group.protocol", "consumer");
        KafkaConsumer<String, String> c = consumer(p);
        c.subscribe(List.of(topic));
        return c;
    }

    static void settle(String step, List<String> names, List<KafkaConsumer<String, String>> members,
                       List<Integer> want) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            boolean done = true;
            for (int i = 0; i < members.size(); i++) {
                members.get(i).poll(Duration.ofMillis(100));
                done &= members.get(i).assignment().size() == want.get(i);
            }
            if (done) {
                for (int i = 0; i < members.size(); i++) {
                    KafkaConsumer<String, String> c = members.get(i);
                    List<String> parts = new ArrayList<>();
                    c.assignment().stream().map(TopicPartition::partition).sorted()
                            .forEach(n -> parts.add(Integer.toString(n)));
                    System.out.println("owned " + step + " " + names.get(i) + " " + c.groupMetadata().memberId()
                            + " " + String.join(",", parts));
                }
                return;
            }
        }
        throw new IllegalStateException("group did not settle at " + step);
    }

    static void txn(String bootstrap, String topic, int n) throws Exception {
        createTopics(bootstrap, "java-admin", List.of(topic));
        Properties p = base(bootstrap, "java-txn-producer");
        p.put("transactional.id", "kw-txn");
        p.put("linger.ms", "5");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> prod = producer(p)) {
            prod.initTransactions();
            int[][] txns = {{n, 1}, {n / 2, 0}, {n, 1}};  // {records, commit?}
            int next = 0;
            for (int[] t : txns) {
                prod.beginTransaction();
                for (int i = 0; i < t[0]; i++, next++) {
                    prod.send(new ProducerRecord<>(topic, 0, "key-" + (next % 5), payload(next, 100)));
                }
                // abortTransaction drops batches not yet sent: send them first,
                // so the aborted records and their ABORT marker are on the wire
                prod.flush();
                if (t[1] == 1 && next == n) {
                    // consume-transform-produce: offsets committed inside the transaction
                    prod.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(n)),
                                                  new ConsumerGroupMetadata("kw-txn-group"));
                }
                if (t[1] == 1) prod.commitTransaction(); else prod.abortTransaction();
                System.out.println((t[1] == 1 ? "committed" : "aborted") + " count=" + t[0]);
            }
        }
        int committed = 2 * n, all = 2 * n + n / 2;
        readAll(bootstrap, tp, "read_committed", committed);
        readAll(bootstrap, tp, "read_uncommitted", all);
    }

    static void readAll(String bootstrap, TopicPartition tp, String isolation, int n) {
        Properties p = base(bootstrap, "java-" + isolation.replace('_', '-'));
        p.put("isolation.level", isolation);
        int seen = 0;
        try (KafkaConsumer<String, String> c = consumer(p)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (seen < n && System.nanoTime() < deadline) {
                seen += c.poll(Duration.ofMillis(300)).count();
            }
            // one more poll: nothing beyond n may arrive
            seen += c.poll(Duration.ofMillis(300)).count();
        }
        System.out.println("read isolation=" + isolation + " count=" + seen);
        // more than n is the broker's business (Tansu 0.6 does not filter
        // aborted records for read_committed); the Python side asserts counts
        if (seen < n) throw new IllegalStateException(isolation + " read " + seen + " of " + n);
    }

    /** Admin calls: each prints ok or the exception class, so a broker that
     *  lacks an API (Tansu) still leaves its request in the capture. */
    interface Call { Object run() throws Exception; }

    static Object step(String name, Call c) {
        try {
            Object r = c.run();
            System.out.println("admin " + name + " ok");
            return r;
        } catch (Exception e) {
            Throwable t = e.getCause() != null ? e.getCause() : e;
            System.out.println("admin " + name + " error=" + t.getClass().getSimpleName());
            return null;
        }
    }

    static void admin(String bootstrap, String prefix) throws Exception {
        String a = prefix + "-a", b = prefix + "-b";
        try (Admin admin = Admin.create(base(bootstrap, "java-admin"))) {
            step("createTopics", () -> admin.createTopics(List.of(
                    new NewTopic(a, 3, (short) 1),
                    new NewTopic(b, Optional.of(1), Optional.empty()).configs(Map.of("retention.ms", "3600000"))))
                    .all().get(WAIT_S, TimeUnit.SECONDS));
            // again: TOPIC_ALREADY_EXISTS (36) in the capture
            step("createTopicsAgain", () -> admin.createTopics(List.of(new NewTopic(a, 3, (short) 1))).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            step("listTopics", () -> admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS));
            step("describeTopics", () -> admin.describeTopics(List.of(a, b)).allTopicNames()
                    .get(WAIT_S, TimeUnit.SECONDS));
            Object nodes = step("describeCluster", () -> admin.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS));
            String brokerId = "1";
            if (nodes instanceof Collection<?> col && !col.isEmpty()) {
                brokerId = String.valueOf(((org.apache.kafka.common.Node) col.iterator().next()).id());
            }
            ConfigResource topicRes = new ConfigResource(ConfigResource.Type.TOPIC, a);
            ConfigResource brokerRes = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
            step("describeConfigs", () -> admin.describeConfigs(List.of(topicRes, brokerRes)).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            step("incrementalAlterConfigs", () -> admin.incrementalAlterConfigs(Map.of(topicRes, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET))))
                    .all().get(WAIT_S, TimeUnit.SECONDS));
            step("createPartitions", () -> admin.createPartitions(Map.of(b, NewPartitions.increaseTo(2))).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            step("listOffsets", () -> admin.listOffsets(Map.of(new TopicPartition(a, 0), OffsetSpec.latest())).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            step("listGroups", () -> admin.listGroups().all().get(WAIT_S, TimeUnit.SECONDS));
            step("describeConsumerGroups", () -> admin.describeConsumerGroups(List.of(prefix + "-group")).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            // a group that does not exist: GROUP_ID_NOT_FOUND (69)
            step("deleteConsumerGroups", () -> admin.deleteConsumerGroups(List.of(prefix + "-group")).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            step("describeFeatures", () -> admin.describeFeatures().featureMetadata().get(WAIT_S, TimeUnit.SECONDS));
            step("deleteTopics", () -> admin.deleteTopics(List.of(a, b)).all().get(WAIT_S, TimeUnit.SECONDS));
        }
    }

    static Properties sasl(String bootstrap, String clientId, String mechanism, String jaas) {
        Properties p = base(bootstrap, clientId);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", mechanism);
        p.put("sasl.jaas.config", jaas);
        return p;
    }

    /** Every kind of secret kafkawire must redact, on the wire of a SASL_PLAINTEXT listener. The
     *  secrets the client knows are printed ("secret NAME=VALUE") for the capture's witness file. */
    static void secrets(String bootstrap, String topic, String user, String password) throws Exception {
        String scram = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"" + user
                + "\" password=\"" + password + "\";";
        try (Admin admin = Admin.create(sasl(bootstrap, "secrets-admin-scram", "SCRAM-SHA-256", scram))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(WAIT_S, TimeUnit.SECONDS);
            DelegationToken token = admin.createDelegationToken(new CreateDelegationTokenOptions())
                    .delegationToken().get(WAIT_S, TimeUnit.SECONDS);
            System.out.println("secret token_id=" + token.tokenInfo().tokenId());
            System.out.println("secret token_hmac=" + token.hmacAsBase64String());
            // the controller makes the token; the broker knows it once the metadata reaches it
            List<DelegationToken> described = List.of();
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (described.isEmpty() && System.nanoTime() < until) {
                described = admin.describeDelegationToken().delegationTokens().get(WAIT_S, TimeUnit.SECONDS);
                if (described.isEmpty()) Thread.sleep(100);
            }
            System.out.println("described tokens=" + described.size());
            long expiry = admin.renewDelegationToken(token.hmac()).expiryTimestamp().get(WAIT_S, TimeUnit.SECONDS);
            System.out.println("renewed expiry=" + expiry);
            // a login with the token: SCRAM with the token id as user name, the HMAC as password
            String tokenJaas = "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                    + token.tokenInfo().tokenId() + "\" password=\"" + token.hmacAsBase64String()
                    + "\" tokenauth=\"true\";";
            try (Admin viaToken = Admin.create(sasl(bootstrap, "secrets-admin-token", "SCRAM-SHA-256", tokenJaas))) {
                int nodes = viaToken.describeCluster().nodes().get(WAIT_S, TimeUnit.SECONDS).size();
                System.out.println("token login nodes=" + nodes);
            }
            admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(
                    "carol", new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "carol-secret")))
                    .all().get(WAIT_S, TimeUnit.SECONDS);
            System.out.println("secret scram_password=carol-secret");
            admin.expireDelegationToken(token.hmac()).expiryTimestamp().get(WAIT_S, TimeUnit.SECONDS);
            System.out.println("expired token");
        }
        // Kafka's unsecured JWS (alg none): the token itself is the bearer secret
        String oauth = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                + "unsecuredLoginStringClaim_sub=\"" + user + "\";";
        try (KafkaProducer<String, String> prod = producer(sasl(bootstrap, "secrets-producer-oauth",
                "OAUTHBEARER", oauth))) {
            for (int i = 0; i < 3; i++) {
                ProducerRecord<String, String> r = new ProducerRecord<>(topic, 0, "pii-key-" + i,
                        "pii-value-" + i + " jane.doe@example.com");
                r.headers().add("pii-header", ("pii-header-value-" + i).getBytes(StandardCharsets.UTF_8));
                prod.send(r);
            }
            prod.flush();
        }
        System.out.println("produced topic=" + topic + " count=3");
        String plain = "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"" + user
                + "\" password=\"" + password + "\";";
        int seen = 0;
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<String, String> c = consumer(sasl(bootstrap, "secrets-consumer-plain", "PLAIN", plain))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (seen < 3 && System.nanoTime() < deadline) {
                seen += c.poll(Duration.ofMillis(300)).count();
            }
        }
        System.out.println("consumed topic=" + topic + " count=" + seen);
        if (seen != 3) throw new IllegalStateException("consumed " + seen + " of 3");
    }

    /** A producer and a consumer over a TLS listener (security.protocol SSL, or SASL_SSL with
     *  MECHANISM USER PASSWORD after the other arguments), trusting the broker's certificate
     *  (a PEM file): N records with keys NAME-key-I to TOPIC partition 0, read back from the
     *  start. Prints "tls-record CLIENT TOPIC OFFSET KEY VALUE" per record read, for the
     *  capture's witness file. Run with tls_keylog_args() for the key log. */
    static void tls(String bootstrap, String topic, int n, String name, String pem, String[] sasl) {
        Properties p = base(bootstrap, name + "-producer");
        p.put("security.protocol", sasl.length == 0 ? "SSL" : "SASL_SSL");
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", pem);
        if (sasl.length != 0) {
            String module = sasl[0].equals("PLAIN") ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                    : "org.apache.kafka.common.security.scram.ScramLoginModule";
            p.put("sasl.mechanism", sasl[0]);
            p.put("sasl.jaas.config", module + " required username=\"" + sasl[1] + "\" password=\"" + sasl[2]
                    + "\";");
        }
        Properties pp = (Properties) p.clone();
        pp.put("acks", "all");
        pp.put("linger.ms", "5");
        // -Dkafkawire.tls.valueSize=N: values of N bytes (payload()) instead of short ones
        int size = Integer.getInteger("kafkawire.tls.valueSize", 0);
        try (KafkaProducer<String, String> prod = producer(pp)) {
            for (int i = 0; i < n; i++) {
                String value = size > 0 ? payload(i, size) : name + " value " + i;
                prod.send(new ProducerRecord<>(topic, 0, name + "-key-" + i, value));
            }
            prod.flush();
        }
        System.out.println("tls-produced " + name + "-producer " + topic + " " + n);
        p.put("client.id", name + "-consumer");
        TopicPartition tp = new TopicPartition(topic, 0);
        int seen = 0;
        try (KafkaConsumer<String, String> c = consumer(p)) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
            while (seen < n && System.nanoTime() < deadline) {
                for (var r : c.poll(Duration.ofMillis(300))) {
                    System.out.println("tls-record " + name + "-consumer " + r.topic() + " " + r.offset() + " "
                            + r.key() + " " + r.value());
                    seen++;
                }
            }
        }
        if (seen != n) throw new IllegalStateException("consumed " + seen + " of " + n);
    }
}
